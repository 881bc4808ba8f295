// A browser context for pages that must work offline: every request it makes is recorded (also those a
// Content-Security-Policy blocks, and a worker's), and any that would leave this machine is aborted.
import type { Browser, BrowserContext, BrowserContextOptions, Page } from 'playwright-core';

const onThisMachine = (url: string) =>
  url.startsWith('data:') || url.startsWith('blob:') || new URL(url).hostname === '127.0.0.1';

export interface LocalOnlyPage {
  context: BrowserContext;
  page: Page;
  /** Every URL requested so far. */
  requested: string[];
  /** Those that were not for 127.0.0.1 (or data:/blob:). */
  outside: () => string[];
}

export async function localOnlyPage(browser: Browser, options: BrowserContextOptions = {}): Promise<LocalOnlyPage> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  const requested: string[] = [];
  context.on('request', (request) => requested.push(request.url()));
  await context.route('**/*', (route) =>
    onThisMachine(route.request().url()) ? route.continue() : route.abort('blockedbyclient'),
  );
  const page = await context.newPage();
  return { context, page, requested, outside: () => requested.filter((url) => !onThisMachine(url)) };
}
