/** Hex helpers for digests (SHA-256 in headers, trailers and HTTP headers). */

/** Lower-case hex of `bytes`, two digits a byte. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

/**
 * Parses hex (either case, even length, no prefix) into bytes.
 * @throws {RangeError} when `hex` is not valid hex, or not `expectedBytes` long when that is given.
 */
export function fromHex(hex: string, expectedBytes?: number): Uint8Array {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) {
    throw new RangeError(`not a hex string: ${JSON.stringify(hex.length > 80 ? `${hex.slice(0, 80)}...` : hex)}`);
  }
  if (expectedBytes !== undefined && hex.length !== expectedBytes * 2) {
    throw new RangeError(`expected ${expectedBytes} bytes of hex (${expectedBytes * 2} digits), got ${hex.length} digits`);
  }
  return new Uint8Array(Buffer.from(hex, 'hex'));
}
