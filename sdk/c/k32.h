/*
 * k32.h: the Kube32 pod ABI for C, compiled with clang --target=wasm32 (docs/writing-pods.md).
 *
 *   clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry -Isdk/c -o pod.wasm pod.c
 *
 * Declares the k32 imports, the export attribute, and small helpers (a bump allocator for
 * k32_alloc that is reset between calls, string and number formatting) so that a pod needs no libc.
 * Everything is static inline: include it in one translation unit.
 */
#ifndef K32_H
#define K32_H

#include <stdint.h>
#include <stddef.h>

#define K32_IMPORT(name) __attribute__((import_module("k32"), import_name(#name)))
#define K32_EXPORT(name) __attribute__((export_name(#name)))

/* ---- imports (pod-abi.md, "Imports the node provides") */
K32_IMPORT(k32_time_ms) int64_t k32_time_ms(void);
K32_IMPORT(k32_log) void k32_log(const char *ptr, int32_t len);
K32_IMPORT(k32_env) int32_t k32_env(const char *key, int32_t key_len, char *buf, int32_t buf_len);
K32_IMPORT(k32_asset) int32_t k32_asset(const char *name, int32_t name_len, char *buf, int32_t buf_len);
K32_IMPORT(kube32_channel_open) int32_t kube32_channel_open(const char *name, int32_t name_len);
K32_IMPORT(k32_channel_send) int32_t k32_channel_send(int32_t handle, const void *ptr, int32_t len);
K32_IMPORT(k32_fs_open) int32_t k32_fs_open(const char *path, int32_t path_len, int32_t flags);
K32_IMPORT(k32_fs_read) int32_t k32_fs_read(int32_t fd, void *ptr, int32_t len);
K32_IMPORT(k32_fs_write) int32_t k32_fs_write(int32_t fd, const void *ptr, int32_t len);
K32_IMPORT(k32_fs_close) int32_t k32_fs_close(int32_t fd);

/* k32_fs_open flags */
#define K32_FS_READ 0
#define K32_FS_WRITE 1  /* create, truncate */
#define K32_FS_APPEND 2 /* create */

/* ---- strings without libc */
static inline int32_t k32_strlen(const char *s) {
  int32_t n = 0;
  while (s[n]) n++;
  return n;
}

static inline void k32_memcpy(void *dst, const void *src, int32_t n) {
  unsigned char *d = (unsigned char *)dst;
  const unsigned char *s = (const unsigned char *)src;
  for (int32_t i = 0; i < n; i++) d[i] = s[i];
}

/* Logs a NUL-terminated line. */
static inline void k32_log_str(const char *s) { k32_log(s, k32_strlen(s)); }

/* ---- a growable output buffer for building responses */
typedef struct {
  char *data;
  int32_t len;
  int32_t cap;
} k32_buf;

static inline void k32_buf_put(k32_buf *b, const char *s, int32_t n) {
  if (b->len + n > b->cap) n = b->cap - b->len; /* truncate rather than overflow */
  k32_memcpy(b->data + b->len, s, n);
  b->len += n;
}

static inline void k32_buf_str(k32_buf *b, const char *s) { k32_buf_put(b, s, k32_strlen(s)); }

static inline void k32_buf_i64(k32_buf *b, int64_t v) {
  char tmp[24];
  int32_t n = 0;
  uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + (u % 10));
    u /= 10;
  } while (u);
  if (v < 0) tmp[n++] = '-';
  for (int32_t i = n - 1; i >= 0; i--) k32_buf_put(b, &tmp[i], 1);
}

/* ---- k32_alloc: a bump arena in a static buffer, reset at the start of each request */
#ifndef K32_ARENA_BYTES
#define K32_ARENA_BYTES (64 * 1024)
#endif
static unsigned char k32_arena[K32_ARENA_BYTES];
static int32_t k32_arena_top;

/* Resets the arena: call at the end of k32_handle/k32_event once the input is no longer needed. */
static inline void k32_arena_reset(void) { k32_arena_top = 0; }

/* The node calls this for room for a request or an event; 0 when the arena is full (the node answers 503). */
K32_EXPORT(k32_alloc) int32_t k32_alloc(int32_t size) {
  int32_t at = (k32_arena_top + 7) & ~7;
  if (size < 0 || at + size > K32_ARENA_BYTES) return 0;
  k32_arena_top = at + size;
  return (int32_t)(uintptr_t)(k32_arena + at);
}

/* Packs a response for k32_handle's result: low 32 bits the pointer, high 32 the length. */
static inline int64_t k32_response(const char *ptr, int32_t len) {
  return (int64_t)(uint32_t)(uintptr_t)ptr | ((int64_t)(uint32_t)len << 32);
}

/* Finds the request target ("/path?query") of a raw request; sets *len. */
static inline const char *k32_request_target(const char *req, int32_t req_len, int32_t *len) {
  int32_t i = 0;
  while (i < req_len && req[i] != ' ') i++;
  int32_t start = ++i;
  while (i < req_len && req[i] != ' ') i++;
  *len = i > start ? i - start : 0;
  return req + start;
}

/* True when the request's method is `m` (such as "GET"). */
static inline int k32_request_method_is(const char *req, int32_t req_len, const char *m) {
  int32_t n = k32_strlen(m);
  if (req_len <= n || req[n] != ' ') return 0;
  for (int32_t i = 0; i < n; i++) if (req[i] != m[i]) return 0;
  return 1;
}

#endif /* K32_H */
