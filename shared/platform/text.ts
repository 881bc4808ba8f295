// Text limits as PostHog applies them.

/** The first `max` characters of `text`, counted in code points (a surrogate pair is never split), as PostHog truncates. */
export function clipped(text: string, max = 200): string {
  if (text.length <= max) return text;
  let end = 0;
  for (let count = 0; count < max && end < text.length; count++) end += text.codePointAt(end)! > 0xffff ? 2 : 1;
  return text.slice(0, end);
}
