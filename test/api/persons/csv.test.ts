// CSV cells and rows on their own: quoting, formula neutralising, flattening and the header, and a round
// trip through a small RFC 4180 parser.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { csvCell, csvOfAnswer, rowsToCsv } from '../../../api/persons/csv.ts';

/** RFC 4180 (CRLF records; quoted fields may hold commas, quotes as "", CR and LF). Strict: throws on junk. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let i = 0;
  while (i < text.length) {
    let field = '';
    if (text[i] === '"') {
      i++;
      for (;;) {
        if (i >= text.length) throw new Error('unterminated quoted field');
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
          } else {
            i++;
            break;
          }
        } else field += text[i++];
      }
    } else {
      while (i < text.length && text[i] !== ',' && text[i] !== '\r') {
        if (text[i] === '"' || text[i] === '\n') throw new Error(`bare ${JSON.stringify(text[i])} at ${i}`);
        field += text[i++];
      }
    }
    record.push(field);
    if (text[i] === ',') i++;
    else if (text.startsWith('\r\n', i)) {
      records.push(record);
      record = [];
      i += 2;
    } else throw new Error(`expected , or CRLF at ${i}`);
  }
  if (record.length) throw new Error('last record without CRLF');
  return records;
}

describe('csvCell', () => {
  it.each([
    [null, ''],
    [undefined, ''],
    ['', ''],
    ['plain', 'plain'],
    [42, '42'],
    [-5, '-5'],
    [1.5, '1.5'],
    [true, 'true'],
    [false, 'false'],
  ])('%j → %j (nothing to quote)', (value, cell) => {
    expect(csvCell(value)).toBe(cell);
  });

  it.each([
    ['a,b', '"a,b"'],
    ['say "hi"', '"say ""hi"""'],
    ['"', '""""'],
    ['two\nlines', '"two\nlines"'],
    ['crlf\r\nin', '"crlf\r\nin"'],
    ["it's", `"it's"`],
  ])('%j → %j (quoted; quotes doubled)', (value, cell) => {
    expect(csvCell(value)).toBe(cell);
  });

  it('objects and lists are their JSON, quoted', () => {
    expect(csvCell({ a: 1, b: 'x' })).toBe('"{""a"":1,""b"":""x""}"');
    expect(csvCell([1, 'x', null])).toBe('"[1,""x"",null]"');
    expect(csvCell({})).toBe('{}');
    expect(csvCell([])).toBe('[]');
  });

  it.each([
    ['=1+1', `"'=1+1"`],
    ['+cmd', `"'+cmd"`],
    ['-2+3', `"'-2+3"`],
    ['@SUM(A1)', `"'@SUM(A1)"`],
    ['\tx', `"'\tx"`],
    ['\rx', `"'\rx"`],
    ['-', `"'-"`],
    ['-Infinity', `"'-Infinity"`],
  ])('formula-looking string %j gets a leading quote: %j', (value, cell) => {
    expect(csvCell(value)).toBe(cell);
  });

  it.each(['-5', '+1.5e3', '-.5', '+7.', '-1E-3'])('a signed plain number string %j is left alone', (value) => {
    expect(csvCell(value)).toBe(value);
  });

  it('only strings are neutralised: a negative number is data', () => {
    expect(csvCell(-2)).toBe('-2');
    expect(csvCell({ '=x': 1 })).toBe('"{""=x"":1}"');
  });

  it('a formula character not at the start is harmless', () => {
    expect(csvCell('a=1')).toBe('a=1');
    expect(csvCell(' =1')).toBe(' =1');
  });
});

describe('rowsToCsv', () => {
  it('no rows, or rows without any column: no CSV at all', () => {
    expect(rowsToCsv([])).toBe('');
    expect(rowsToCsv([{}, { a: {} }, { b: [] }])).toBe('');
  });

  it('header is the sorted union of keys; missing cells are empty; CRLF after every line', () => {
    expect(rowsToCsv([{ b: 1, a: 'x' }, { c: true }, { a: null }])).toBe('a,b,c\r\nx,1,\r\n,,true\r\n,,\r\n');
  });

  it('nested objects and lists flatten to dotted keys; empty ones have no column', () => {
    const csv = rowsToCsv([{ p: { name: 'n', tags: ['t1', { k: 2 }], empty: {}, none: [] }, id: 1 }]);
    expect(parseCsv(csv)).toEqual([
      ['id', 'p.name', 'p.tags.0', 'p.tags.1.k'],
      ['1', 'n', 't1', '2'],
    ]);
  });

  it('columns sort as strings: distinct_ids.10 before distinct_ids.2, upper case before lower', () => {
    const row = Object.fromEntries(['x2', 'x10', 'X', 'a.b', 'a_b', 'aa'].map((k) => [k, 1]));
    expect(rowsToCsv([row]).split('\r\n')[0]).toBe('X,a.b,a_b,aa,x10,x2');
    expect(rowsToCsv([{ distinct_ids: Array.from({ length: 11 }, (_, i) => `d${i}`) }]).split('\r\n')[0]).toBe(
      [0, 1, 10, 2, 3, 4, 5, 6, 7, 8, 9].map((i) => `distinct_ids.${i}`).join(','),
    );
  });

  it('a nested key and a dotted key that flatten alike share one column; the later one wins', () => {
    expect(rowsToCsv([{ a: { b: 1 }, 'a.b': 2 }])).toBe('a.b\r\n2\r\n');
  });

  it('a row that is not an object is one cell under the empty column', () => {
    expect(rowsToCsv(['x', null, 5])).toBe('\r\nx\r\n\r\n5\r\n');
  });

  it('a Date has no enumerable keys, so it has no column: answers go through JSON first (csvOfAnswer)', () => {
    expect(rowsToCsv([{ d: new Date(0) }])).toBe('');
    expect(csvOfAnswer()({ results: [{ d: new Date(0) }] })).toBe('d\r\n1970-01-01T00:00:00.000Z\r\n');
  });

  it('csvOfAnswer: a list, a {results} envelope, or one object', () => {
    expect(csvOfAnswer()([{ a: 1 }, { a: 2 }])).toBe('a\r\n1\r\n2\r\n');
    expect(csvOfAnswer()({ count: 9, results: [{ a: 1 }] })).toBe('a\r\n1\r\n');
    expect(csvOfAnswer()({ a: 1, results: 'not a list' })).toBe('a,results\r\n1,not a list\r\n');
    expect(csvOfAnswer((answer) => answer.rows)({ rows: [{ z: 0 }] })).toBe('z\r\n0\r\n');
  });

  // Cells as a spreadsheet would read them back: formula-looking strings carry their leading quote.
  const FORMULA_START = /^[=+\-@\t\r]/;
  const cellText = fc.string({ unit: 'grapheme', maxLength: 10 });
  const safeText = fc.oneof(
    cellText,
    fc.constantFrom(',', '"', '\r\n', '\n', '\r', "'", 'a,"b"\r\nc', ' '),
    fc.array(fc.constantFrom(',', '"', '\n', '\r', 'x', ' ', "'"), { maxLength: 8 }).map((cs) => cs.join('')),
  );
  // [value, the cell a parser gives back]: formula-looking text comes back with one leading quote.
  const cases = fc.oneof(
    safeText.filter((s) => !FORMULA_START.test(s)).map((s) => [s, s]),
    safeText.map((s) => [`=${s}`, `'=${s}`]),
    safeText.filter((s) => !/^[\d.]/.test(s)).map((s) => [`-${s}`, `'-${s}`]),
    fc.stringMatching(/^[+-](\d{1,5}(\.\d{0,3})?|\.\d{1,3})([eE][+-]?\d{1,3})?$/).map((s) => [s, s]),
  );

  it('property: any cell text round-trips through the parser', () => {
    fc.assert(
      fc.property(cases, ([value, expected]) => {
        const [[cell]] = parseCsv(`${csvCell(value)}\r\n`);
        expect(cell).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });

  it('property: rows round-trip through the parser, column by column', () => {
    const key = fc.stringMatching(/^[a-z_]{1,4}$/);
    const plain = fc.oneof(
      safeText.filter((s) => !FORMULA_START.test(s)),
      fc.integer(),
      fc.boolean(),
      fc.constant(null),
    );
    fc.assert(
      fc.property(
        fc.array(fc.dictionary(key, plain, { minKeys: 1, maxKeys: 5 }), { minLength: 1, maxLength: 6 }),
        (rows) => {
          const [header, ...records] = parseCsv(rowsToCsv(rows));
          expect(header).toEqual([...new Set(rows.flatMap((r) => Object.keys(r)))].sort());
          expect(records).toHaveLength(rows.length);
          const expected = rows.map((row) =>
            header.map((column) => (row[column] === null || row[column] === undefined ? '' : String(row[column]))),
          );
          expect(records).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });
});
