/**
 * K32S golden vectors, written byte by byte from the seed's tables (seed 002, "Snapshot format"),
 * not by the encoder. Each line is hex bytes, `#` starts a comment. The trailers were computed once
 * with `sha256sum` over the bytes before them.
 */

/** Parses a commented hex listing into bytes. */
export function hexBytes(listing: string): Uint8Array {
  const digits = listing
    .split('\n')
    .map((line) => line.replace(/#.*$/, ''))
    .join('')
    .replace(/\s+/g, '');
  if (!/^([0-9a-f]{2})*$/.test(digits)) throw new Error('bad hex listing');
  return new Uint8Array(Buffer.from(digits, 'hex'));
}

/** SHA-256 of the 8-byte empty module `00 61 73 6d 01 00 00 00`, the image of every vector. */
export const EMPTY_MODULE_SHA256 = '93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476';

/**
 * Vector A: every section of version 1. A pod with a 16-byte memory limit (one page, 16 bytes
 * backed), two mutable globals, one table, one channel and one held event. 207 bytes.
 */
export const GOLDEN_A = hexBytes(`
# header, 68 bytes
4b 33 32 53                                        # magic "K32S"
01 00                                              # u16 version 1
00 00                                              # u16 flags 0
93 a4 4b bb 96 c7 51 21 8e 4c 00 d4 79 e4 c1 43    # image SHA-256 (of the 8-byte empty module
58 12 2a 38 9a cc a1 62 05 b1 e4 d0 dc 5f 94 76    #   00 61 73 6d 01 00 00 00)
10 00 00 00                                        # u32 memory bytes 16 (limit below one page)
01 00 00 00                                        # u32 memory pages 1
87 d6 12 00 00 00 00 00                            # u64 pod time 1234567 ms
00 03 9b 27 a2 01 00 00                            # u64 Unix time 1795960800000 ms (2026-11-29T14:00:00Z)
05 00 00 00                                        # u32 section count 5
# section MEMORY
01 00  10 00 00 00                                 # type 1, length 16
68 65 6c 6c 6f 20 6b 75 62 65 33 32 00 00 00 2a    # "hello kube32" 00 00 00 2a
# section GLOBALS
02 00  1a 00 00 00                                 # type 2, length 26 (two entries of 13)
00 00 00 00  7f  ff ff ff ff 00 00 00 00           # global 0, i32, -1
03 00 00 00  7c  00 00 00 00 00 00 f8 3f           # global 3, f64, 1.5
# section TABLE
03 00  10 00 00 00                                 # type 3, length 16
00 00 00 00                                        # table 0
02 00 00 00                                        # size 2
03 00 00 00                                        # entry 0: function 3
ff ff ff ff                                        # entry 1: null
# section CHANNELS
04 00  0a 00 00 00                                 # type 4, length 10
01 00 00 00  04 00  74 65 6d 70                    # handle 1, name "temp"
# section EVENTS
05 00  09 00 00 00                                 # type 5, length 9
01 00  74  02 00 00 00  68 69                      # topic "t", payload "hi"
# trailer: SHA-256 of the 175 bytes above
43 dc fe e7 87 06 71 19 3f b6 c4 79 17 58 7d 17 f7 7d 8e fc b9 f0 44 b2 96 74 46 03 5c 3e 78 e1
`);

/** Vector B: the smallest snapshot, a module without memory, globals or tables: header and trailer. 100 bytes. */
export const GOLDEN_B = hexBytes(`
4b 33 32 53  01 00  00 00                          # "K32S", version 1, flags 0
93 a4 4b bb 96 c7 51 21 8e 4c 00 d4 79 e4 c1 43    # image SHA-256
58 12 2a 38 9a cc a1 62 05 b1 e4 d0 dc 5f 94 76
00 00 00 00  00 00 00 00                           # memory bytes 0, memory pages 0
00 00 00 00 00 00 00 00                            # pod time 0
00 00 00 00 00 00 00 00                            # Unix time 0 (node clock unset)
00 00 00 00                                        # no sections
# trailer
f2 8d 5d 38 ec 97 bf fb 8e 0c 53 ab 35 f0 65 d3 5e 6b ae 59 7c f5 fb 29 5f 5c 81 d3 df 25 e2 55
`);

/** Vector C: an unknown section (skipped), sections out of the writer's order, some absent. 134 bytes. */
export const GOLDEN_C = hexBytes(`
4b 33 32 53  01 00  00 00                          # "K32S", version 1, flags 0
93 a4 4b bb 96 c7 51 21 8e 4c 00 d4 79 e4 c1 43    # image SHA-256
58 12 2a 38 9a cc a1 62 05 b1 e4 d0 dc 5f 94 76
00 00 00 00  00 00 00 00                           # memory bytes 0, memory pages 0
2a 00 00 00 00 00 00 00                            # pod time 42
00 00 00 00 00 00 00 00                            # Unix time 0
03 00 00 00                                        # 3 sections
ff 00  03 00 00 00  61 62 63                       # type 255 (unknown), length 3: skipped
05 00  0d 00 00 00  02 00 6f 6b  05 00 00 00 01 02 03 04 05   # EVENTS: topic "ok", 5-byte payload
01 00  00 00 00 00                                 # MEMORY, empty
# trailer
a4 82 3d d5 8d be 9e 87 42 f7 8a d3 df 53 0c ea 17 9a cd c9 ad 49 cc f6 97 3d b0 dd 41 ab b2 c1
`);
