/*
 * counter-c: the counter example in C. Counts requests and ticks and answers
 * {"count":N,"ticks":T,"podTimeMs":M,"restores":R,"node":"..."}; its state lives in globals, so a
 * move carries it. Built by `npm run build` into build/examples/counter-c.wasm with
 *   clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry -Isdk/c -o counter-c.wasm counter.c
 */
#include "k32.h"

static int64_t count;
static int64_t ticks;
static int32_t restores;
static char out[1024];

K32_EXPORT(k32_init) void k32_init(void) { k32_log_str("counter-c: started afresh"); }

K32_EXPORT(k32_restored) void k32_restored(void) {
  restores++;
  char line[96];
  k32_buf b = {line, 0, sizeof line};
  k32_buf_str(&b, "counter-c: restored at count ");
  k32_buf_i64(&b, count);
  k32_log(line, b.len);
}

K32_EXPORT(k32_tick) void k32_tick(void) { ticks++; }

static int path_is(const char *t, int32_t n, const char *p) {
  int32_t m = k32_strlen(p);
  int32_t end = 0;
  while (end < n && t[end] != '?') end++;
  if (end != m) return 0;
  for (int32_t i = 0; i < m; i++) if (t[i] != p[i]) return 0;
  return 1;
}

K32_EXPORT(k32_handle) int64_t k32_handle(const char *req, int32_t len) {
  int32_t tlen;
  const char *target = k32_request_target(req, len, &tlen);
  k32_buf b = {out, 0, sizeof out};
  if (!path_is(target, tlen, "/") && !path_is(target, tlen, "/count")) {
    k32_buf_str(&b, "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\nnot found\n");
    k32_arena_reset();
    return k32_response(out, b.len);
  }
  count++;
  char node[64];
  int32_t nlen = k32_env("NODE_NAME", 9, node, sizeof node);
  if (nlen < 0) nlen = 0;
  if (nlen > (int32_t)sizeof node) nlen = sizeof node;
  char body[256];
  k32_buf j = {body, 0, sizeof body};
  k32_buf_str(&j, "{\"count\":");
  k32_buf_i64(&j, count);
  k32_buf_str(&j, ",\"ticks\":");
  k32_buf_i64(&j, ticks);
  k32_buf_str(&j, ",\"podTimeMs\":");
  k32_buf_i64(&j, k32_time_ms());
  k32_buf_str(&j, ",\"restores\":");
  k32_buf_i64(&j, restores);
  k32_buf_str(&j, ",\"node\":\"");
  k32_buf_put(&j, node, nlen);
  k32_buf_str(&j, "\"}\n");
  k32_buf_str(&b, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ");
  k32_buf_i64(&b, j.len);
  k32_buf_str(&b, "\r\n\r\n");
  k32_buf_put(&b, body, j.len);
  k32_arena_reset();
  return k32_response(out, b.len);
}
