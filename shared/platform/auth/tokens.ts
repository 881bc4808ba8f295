// Secrets: personal API keys (phx_…), project API tokens (phc_…) and their stored forms.
import { hash, randomBytes } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function base62(bytes: Buffer): string {
  let n = BigInt(`0x${bytes.toString('hex')}`);
  let out = '';
  while (n > 0n) {
    out = BASE62[Number(n % 62n)] + out;
    n /= 62n;
  }
  return out || '0';
}

export const generatePersonalApiKey = () => `phx_${base62(randomBytes(35))}`;
export const generateProjectApiToken = () => `phc_${base62(randomBytes(32))}`;
/** Primary key of a personal_api_key row: random, not derived from the secret. */
export const generateKeyId = () => base62(randomBytes(24));

/**
 * The only form of a personal API key that is stored. Unsalted, as PostHog does, so lookup is one index
 * probe. Every authenticated request hashes its key: the one-shot hash() costs half of createHash().
 */
export const hashPersonalApiKey = (value: string) => `sha256$${hash('sha256', value)}`;

export const maskPersonalApiKey = (value: string) => (value.length < 16 ? '********' : `phx_...${value.slice(-4)}`);
