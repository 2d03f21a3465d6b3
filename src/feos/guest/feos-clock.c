/* feos-clock: the guest's clock steps for the agent (seed 000, "The guest": AdjustTime, SetTime).
 *   feos-clock step OFFSET_NS     clock_settime(CLOCK_REALTIME, now + OFFSET_NS)
 *   feos-clock adjust OFFSET_NS   slews by adjtimex(ADJ_OFFSET|ADJ_NANO) when |OFFSET| < 0.5 s, else steps
 * Taking an offset rather than a time makes the helper's start-up latency irrelevant.
 * Built static by scripts/build-guest.sh (clang, Debian's libc.a). Exit 0 on success, 1 with a message. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>
#include <time.h>

static int step(long long off) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) { perror("clock_gettime"); return 1; }
  long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + off;
  ts.tv_sec = ns / 1000000000LL;
  ts.tv_nsec = ns % 1000000000LL;
  if (ts.tv_nsec < 0) { ts.tv_nsec += 1000000000LL; ts.tv_sec -= 1; }
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) { perror("clock_settime"); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: feos-clock step|adjust OFFSET_NS\n"); return 2; }
  char *end;
  errno = 0;
  long long off = strtoll(argv[2], &end, 10);
  if (errno != 0 || *end != '\0') { fprintf(stderr, "feos-clock: bad offset %s\n", argv[2]); return 2; }
  if (strcmp(argv[1], "step") == 0) return step(off);
  if (strcmp(argv[1], "adjust") == 0) {
    if (off > -500000000LL && off < 500000000LL) {
      struct timex tx;
      memset(&tx, 0, sizeof tx);
      tx.modes = ADJ_OFFSET | ADJ_NANO | ADJ_STATUS;
      tx.status = STA_PLL;
      tx.offset = (long)off;
      if (adjtimex(&tx) < 0) { perror("adjtimex"); return 1; }
      return 0;
    }
    return step(off);
  }
  fprintf(stderr, "feos-clock: unknown command %s\n", argv[1]);
  return 2;
}
