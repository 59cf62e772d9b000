#include "base/sandbox.h"
#include "base/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

/* Message frame from child to parent: status byte + NUL-free text. */
#define KC_SANDBOX_MSG_MAX 1024

static int kc_sandbox_disabled(void)
{
    const char *v = getenv("KC_SANDBOX");
    return v && strcmp(v, "0") == 0;
}

static int kc_sandbox_memfd(void)
{
    /* The disk tier: the result goes to a disk file that is mapped later. */
    if (kc_spill_dir())
        return kc_spill_tmpfile(kc_spill_dir());
    int fd = memfd_create("kerasc-sandbox", MFD_CLOEXEC);
    if (fd >= 0)
        return fd;
    /* Kernels without memfd: an unlinked temporary file does the same. */
    char path[] = "/tmp/kerasc-sandbox-XXXXXX";
    fd = mkstemp(path);
    if (fd >= 0)
        unlink(path);
    return fd;
}

static void kc_sandbox_child(int msg_fd, int out_fd, kc_sandbox_work work, void *arg,
                             unsigned cpu_seconds)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* A crash of the parser kills only the child, silently: handlers the
     * parent installed (a fuzzer's, a crash reporter's) must not run in it
     * and report the parent's state. */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], SIG_DFL);
    /* The child reports through the pipe; whatever a crashing parser (or a
     * sanitizer) prints would break the one-line error contract. */
    if (!getenv("KC_SANDBOX_STDERR")) {
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull >= 0) {
            dup2(devnull, STDERR_FILENO);
            close(devnull);
        }
    }
    struct rlimit cpu = {cpu_seconds, cpu_seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    /* No core dumps of a crash on a hostile file. */
    struct rlimit core = {0, 0};
    setrlimit(RLIMIT_CORE, &core);
    kc_status st = work(arg, out_fd);
    char msg[KC_SANDBOX_MSG_MAX + 1];
    msg[0] = (char)st;
    size_t len = 1;
    if (st != KC_OK) {
        size_t n = strlen(kc_last_error());
        if (n > KC_SANDBOX_MSG_MAX - 1)
            n = KC_SANDBOX_MSG_MAX - 1;
        memcpy(msg + 1, kc_last_error(), n);
        len += n;
    }
    ssize_t w = write(msg_fd, msg, len);
    (void)w;
    /* _exit: no atexit handlers, no leak reports from the parser's state. */
    _exit(st == KC_OK ? 0 : 1);
}

/* Read the child's message until EOF or the deadline; returns bytes read,
 * -1 on timeout. */
static ssize_t kc_sandbox_read_msg(int fd, char *buf, size_t cap, double deadline)
{
    size_t got = 0;
    for (;;) {
        double left = deadline - kc_now();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? -1 : (ssize_t)got;
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return (ssize_t)got;
        got += (size_t)n;
        if (got == cap)
            return (ssize_t)got;
    }
}

static kc_status kc_sandbox_wait(const char *label, const char *what, pid_t pid, int msg_fd,
                                 unsigned cpu_seconds)
{
    char msg[KC_SANDBOX_MSG_MAX + 1];
    /* Wall-clock deadline well above the CPU limit: a child blocked on I/O
     * is killed too. */
    double deadline = kc_now() + 2.0 * cpu_seconds + 10.0;
    ssize_t n = kc_sandbox_read_msg(msg_fd, msg, KC_SANDBOX_MSG_MAX, deadline);
    if (n < 0)
        kill(pid, SIGKILL);
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return kc_fail(KC_ERR_FORMAT, "%s: %s did not finish within %u s (a malformed file?)",
                       label, what, 2 * cpu_seconds + 10);
    if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        if (sig == SIGXCPU || sig == SIGKILL)
            return kc_fail(KC_ERR_FORMAT, "%s: %s exceeded its %u s CPU limit (a malformed "
                           "file?)", label, what, cpu_seconds);
        return kc_fail(KC_ERR_FORMAT, "%s: %s crashed (signal %d) on this file: it is "
                       "malformed", label, what, sig);
    }
    if (n >= 1) {
        msg[n] = '\0';
        kc_status st = (kc_status)(unsigned char)msg[0];
        if (st == KC_OK && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
            return KC_OK;
        if (st != KC_OK && n > 1)
            return kc_fail(st, "%s", msg + 1);
    }
    return kc_fail(KC_ERR_FORMAT, "%s: %s failed on this file (exit status %d)", label, what,
                   WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
}

kc_status kc_sandbox_run(const char *label, const char *what, kc_sandbox_work work, void *arg,
                         unsigned cpu_seconds, int *fd_out)
{
    *fd_out = -1;
    int out_fd = kc_sandbox_memfd();
    if (out_fd < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot create a memory file: %s", label, strerror(errno));
    kc_status st;
    if (kc_sandbox_disabled()) {
        st = work(arg, out_fd);
    } else {
        int pipe_fds[2];
        if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
            close(out_fd);
            return kc_fail(KC_ERR_IO, "%s: pipe: %s", label, strerror(errno));
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(pipe_fds[0]);
            close(pipe_fds[1]);
            close(out_fd);
            return kc_fail(KC_ERR_IO, "%s: fork: %s", label, strerror(errno));
        }
        if (pid == 0) {
            close(pipe_fds[0]);
            kc_sandbox_child(pipe_fds[1], out_fd, work, arg, cpu_seconds);
        }
        close(pipe_fds[1]);
        st = kc_sandbox_wait(label, what, pid, pipe_fds[0], cpu_seconds);
        close(pipe_fds[0]);
    }
    if (st == KC_OK && lseek(out_fd, 0, SEEK_SET) != 0)
        st = kc_fail(KC_ERR_IO, "%s: lseek: %s", label, strerror(errno));
    if (st != KC_OK) {
        close(out_fd);
        return st;
    }
    *fd_out = out_fd;
    return KC_OK;
}
