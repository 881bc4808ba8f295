// npm 11 runs a dependency's install scripts only when package.json's `allowScripts` approves them (it
// warns today, and fails under --strict-allow-scripts or once that is the default). Every package of the
// lock with install scripts must be decided: approved (true) or denied (false), for its locked version.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const read = (file: string) => JSON.parse(readFileSync(new URL(`../${file}`, import.meta.url), 'utf8'));
const pkg = read('package.json');
const lock = read('package-lock.json');

/** Every locked package that has install scripts (`hasInstallScript`), with its version and resolved URL. */
const withScripts = Object.entries(
  lock.packages as Record<string, { version?: string; resolved?: string; hasInstallScript?: boolean }>,
)
  .filter(([path, entry]) => path !== '' && entry.hasInstallScript)
  .map(([path, entry]) => ({
    name: path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length),
    version: entry.version,
    resolved: entry.resolved,
  }));

/**
 * What allowScripts decides for a locked package, as npm 11 matches it (arborist's script-allowed.js):
 * a bare name (or name@*) matches every version; name@exact versions joined by "||" match only a version
 * npm can verify, the one in the lock's resolved URL. Our lock has none (omit-lockfile-registry-resolved),
 * so there a pinned approval is refused and a pinned denial still denies (npm fails closed). Deny wins.
 */
function decision(p: (typeof withScripts)[number]): boolean | undefined {
  const policy: Record<string, boolean> = pkg.allowScripts ?? {};
  const verified = p.resolved?.includes(`/-/`) ? p.version : undefined;
  let allow = false;
  for (const [key, value] of Object.entries(policy)) {
    const at = key.lastIndexOf('@');
    const [keyName, spec] = at > 0 ? [key.slice(0, at), key.slice(at + 1)] : [key, ''];
    if (keyName !== p.name) continue;
    const pinned = spec !== '' && spec !== '*';
    const matches = !pinned || (verified === undefined ? !value : spec.split('||').some((v) => v.trim() === verified));
    if (!matches) continue;
    if (!value) return false;
    allow = true;
  }
  return allow ? true : undefined;
}

describe('install scripts (npm 11 allowScripts)', () => {
  it('finds the packages with install scripts in the lock', () => {
    expect(withScripts.map((p) => p.name)).toEqual(
      expect.arrayContaining(['node', 'chdb', 'msgpackr-extract', 'core-js']),
    );
  });

  it('every one is approved or denied in package.json, as npm matches the lock', () => {
    const undecided = withScripts.filter((p) => decision(p) === undefined);
    expect(undecided.map((p) => `${p.name}@${p.version}`)).toEqual([]);
  });

  it('what must run is approved: node (its preinstall puts Node 24 in node_modules/.bin)', () => {
    const node = withScripts.find((p) => p.name === 'node');
    expect(node && decision(node)).toBe(true);
  });
});
