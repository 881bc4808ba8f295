// A LISTEN connection of its own (on DATABASE_DIRECT_URL: a transaction-mode pooler would lose it),
// reconnecting with a growing delay. The in-process caches (auth, flag definitions) rest on it: they
// serve from memory only while `listening`, and drop what they hold on every change it reports.
import pg from 'pg';
import { logger } from '../../shared/platform/logger.ts';

const MAX_RECONNECT_DELAY_MS = 30_000;

export class ChannelListener {
  private client: pg.Client | null = null;
  private stopped = false;
  private reconnectDelayMs = 1000;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private up = false;

  private readonly databaseUrl: string;
  private readonly channel: string;
  /**
   * Called with a notification's payload, and with no payload when anything may have changed unseen:
   * on (re)connecting, and on losing the connection (`listening` is already false then).
   */
  private readonly changed: (payload?: string) => void;

  constructor(databaseUrl: string, channel: string, changed: (payload?: string) => void) {
    this.databaseUrl = databaseUrl;
    this.channel = channel;
    this.changed = changed;
  }

  /** Whether every change is being reported now. */
  get listening(): boolean {
    return this.up;
  }

  /** Resolves once listening, or once the first attempt failed (it then retries). */
  async start(): Promise<void> {
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    this.up = false;
    this.changed();
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl });
    // A failing connection may report through 'error', 'end' and the rejected connect: act once.
    let gone = false;
    const lost = (error?: unknown) => {
      if (gone) return;
      gone = true;
      this.lost(client, error);
    };
    client.on('notification', (message) => this.changed(message.payload));
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`listen ${this.channel}`);
    } catch (error) {
      lost(error);
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.reconnectDelayMs = 1000;
    this.changed(); // changes made while not listening
    this.up = true;
  }

  /** Off at once, then a new connection after a growing delay. */
  private lost(client: pg.Client, error?: unknown): void {
    this.up = false;
    this.changed();
    if (this.client === client) this.client = null;
    client.end().catch(() => undefined);
    if (this.stopped) return;
    logger.warn(
      { err: error instanceof Error ? error.message : undefined, retryInMs: this.reconnectDelayMs },
      `${this.channel} listener lost: its cache is off until it listens again`,
    );
    this.reconnectTimer = setTimeout(() => void this.connect(), this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(this.reconnectDelayMs * 2, MAX_RECONNECT_DELAY_MS);
  }
}
