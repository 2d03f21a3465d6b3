/**
 * How the guest formats a volume (seed 000, "Volumes"; docs/feos/guest.md): busybox's `mke2fs` makes
 * ext2, which has no lazy inode table and no flexible block groups, so every inode table and bitmap is
 * written at the format, into the volume's qcow2 on the node's disk. With mke2fs's default of an inode
 * per 16 KiB, a 1 TiB volume wrote 16 GiB of inode tables and a 16 TiB one did not end within its
 * timeout (4.6 GiB written; measured). So the inodes are capped, and the block count is kept within
 * ext2's 32 bits. Pure: imported by the agent and by the node's tests.
 */

/** The block size of a formatted volume (bytes). */
export const VOLUME_BLOCK_BYTES = 4096;
/** An inode per this many bytes at least (mke2fs's default). */
export const MIN_BYTES_PER_INODE = 16 * 1024;
/** The most inodes a volume gets (an inode table of 256 MiB at 256 bytes an inode). */
export const MAX_VOLUME_INODES = 2 ** 20;
/** ext2's block count is 32 bits: 16 TiB of 4 KiB blocks is one more than it holds. */
export const MAX_VOLUME_BLOCKS = 2 ** 32 - 1;

/**
 * The arguments of busybox's `mke2fs` for a volume: 4 KiB blocks, an inode per 16 KiB or, above 16 GiB,
 * per the power of two that keeps the inodes at `MAX_VOLUME_INODES` at most, and the size in KiB
 * (at most `MAX_VOLUME_BLOCKS` blocks: a 16 TiB volume loses its last 4 KiB).
 * @param label the file system's label (the volume's name; ext2 keeps 16 bytes)
 * @param dev the block device
 * @param sizeBytes the device's size (bytes)
 */
export function mke2fsArgs(label: string, dev: string, sizeBytes: number): string[] {
  let bytesPerInode = MIN_BYTES_PER_INODE;
  while (sizeBytes / bytesPerInode > MAX_VOLUME_INODES) bytesPerInode *= 2;
  const blocks = Math.min(Math.floor(sizeBytes / VOLUME_BLOCK_BYTES), MAX_VOLUME_BLOCKS);
  const kib = (blocks * VOLUME_BLOCK_BYTES) / 1024;
  return ['-F', '-b', String(VOLUME_BLOCK_BYTES), '-i', String(bytesPerInode), '-L', label.slice(0, 16), dev, String(kib)];
}

/**
 * How long a format may take (ms): 120 s, and 60 s per TiB for the bitmaps (64 MiB a TiB) and inode
 * tables, written at about 40 MB/s under TCG.
 */
export function mke2fsTimeoutMs(sizeBytes: number): number {
  return 120_000 + Math.ceil((60_000 * sizeBytes) / 2 ** 40);
}

/**
 * Why a command failed, in one line for a pod's reason: its stderr, or that it was ended at its timeout
 * (execFile's error then says only "Command failed: <command>" and a newline).
 */
export function commandFailure(err: unknown, timeoutMs: number): string {
  const e = err as { stderr?: string; killed?: boolean; signal?: string; message?: string };
  if (e.killed) return `did not end within ${timeoutMs / 1000} s (${e.signal ?? 'killed'})`;
  return (e.stderr?.trim() || e.message?.trim() || String(err).trim()).replace(/\s*\n\s*/g, '; ');
}
