// feos-pty: runs a command on a new pseudo-terminal and relays it to its own stdin and stdout, for the
// guest agent's exec with a TTY (Node cannot make a pty). Usage: feos-pty COMMAND [ARG...]. Exits with
// the command's exit code (128 + the signal for one ended by a signal). Built static by
// scripts/build-guest.sh into the guest's initramfs as /usr/bin/feos-pty.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int write_all(int fd, const char *buf, ssize_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, (size_t)n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += w;
    n -= w;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: feos-pty COMMAND [ARG...]\n");
    return 2;
  }
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0) {
    perror("feos-pty: openpt");
    return 1;
  }
  const char *name = ptsname(master);
  struct winsize ws = {.ws_row = 24, .ws_col = 80};
  pid_t pid = fork();
  if (pid < 0) {
    perror("feos-pty: fork");
    return 1;
  }
  if (pid == 0) {
    setsid();
    int slave = open(name, O_RDWR);
    if (slave < 0) _exit(127);
    ioctl(slave, TIOCSCTTY, 0);
    ioctl(slave, TIOCSWINSZ, &ws);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    if (slave > 2) close(slave);
    execvp(argv[1], argv + 1);
    perror("feos-pty: exec");
    _exit(127);
  }
  char buf[16384];
  int in_open = 1;
  for (;;) {
    struct pollfd fds[2] = {{.fd = master, .events = POLLIN}, {.fd = 0, .events = in_open ? POLLIN : 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;  // EIO once the last holder of the slave side is gone
      if (write_all(1, buf, n) < 0) break;
    }
    if (in_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n <= 0) {
        in_open = 0;
        char eof = 4;  // ^D: end of input for the terminal's reader
        write_all(master, &eof, 1);
      } else if (write_all(master, buf, n) < 0) {
        in_open = 0;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}
