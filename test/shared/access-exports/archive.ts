// Opening an access export's archive with standard tools, as a privacy officer would: tar -xzf, then
// sha256sum -c SHA256SUMS and openssl pkeyutl -verify of manifest.json against manifest.sig.
import { execFile } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

export interface OpenedArchive {
  folder: string;
  members: string[];
  manifest: any;
  manifestText: string;
  lines: (name: string) => Promise<any[]>;
  /** `sha256sum -c SHA256SUMS` in the folder: true when every member checks. */
  sumsCheck: () => Promise<boolean>;
  /** `openssl pkeyutl -verify` of manifest.json with manifest.sig against this PEM. */
  opensslVerifies: (publicKeyPem: string) => Promise<boolean>;
}

export async function openArchive(archive: string, into: string): Promise<OpenedArchive> {
  await exec('tar', ['-xzf', archive, '-C', into]);
  const [top] = await readdir(into);
  const folder = join(into, top);
  const manifestText = await readFile(join(folder, 'manifest.json'), 'utf8');
  return {
    folder,
    members: (await readdir(folder)).sort(),
    manifest: JSON.parse(manifestText),
    manifestText,
    lines: async (name) =>
      (await readFile(join(folder, name), 'utf8'))
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
    sumsCheck: () =>
      exec('sha256sum', ['-c', '--strict', 'SHA256SUMS'], { cwd: folder }).then(
        () => true,
        () => false,
      ),
    opensslVerifies: async (publicKeyPem) => {
      const pub = join(into, 'served-key.pem');
      await writeFile(pub, publicKeyPem);
      return exec('openssl', [
        'pkeyutl',
        '-verify',
        '-pubin',
        '-inkey',
        pub,
        '-rawin',
        '-in',
        join(folder, 'manifest.json'),
        '-sigfile',
        join(folder, 'manifest.sig'),
      ]).then(
        () => true,
        () => false,
      );
    },
  };
}
