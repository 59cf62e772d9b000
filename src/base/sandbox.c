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
#include "base/env.h"
#include "base/error.h"

/* Message frame from child to parent: status byte + NUL-free text. */
#define KC_SANDBOX_MSG_MAX 1024

static int kc_sandbox_disabled(void)
{
    return kc_env_off("KC_SANDBOX");
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

/* A child that is asleep and has used no CPU time for this long is taken
 * as blocked for good. fork() copies only the calling thread: a lock that
 * another thread of the parent held at that moment (an allocator's, a
 * library's; seen with GCC 12's ASan runtime in a worker whose network
 * threads were busy) stays held in the child, which then waits on it
 * forever without using the CPU its limit counts. A parser at work uses
 * CPU; one waiting on a disk shows state D, not S. */
#define KC_SANDBOX_STALL_SECONDS 3.0
/* Forks tried before a blocked child is reported: the next fork copies
 * the parent at another moment, when that lock is most likely free. */
#define KC_SANDBOX_TRIES 3
/* How often the parent looks at a child it has no message from. */
#define KC_SANDBOX_POLL_MS 200

static double kc_sandbox_stall_seconds(void)
{
    const char *v = getenv("KC_SANDBOX_STALL_SECONDS"); /* tests: fail fast */
    double s = v ? strtod(v, NULL) : 0;
    return s > 0 && s <= 3600 ? s : KC_SANDBOX_STALL_SECONDS;
}

/* The child's state letter and CPU ticks (user + system) from
 * /proc/PID/stat; 0 when it cannot be read (no procfs: never a stall). */
static int kc_sandbox_child_cpu(pid_t pid, char *state, unsigned long long *ticks)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: the
     * fields that follow start after its last ')'. */
    const char *rest = strrchr(line, ')');
    unsigned long long utime = 0, stime = 0;
    if (!rest || sscanf(rest + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", state,
                        &utime, &stime) != 3)
        return 0;
    *ticks = utime + stime;
    return 1;
}

/* Watches a child for progress between polls. */
typedef struct kc_sandbox_watch {
    pid_t pid;
    double stall_s;
    unsigned long long ticks;
    double progress_at;             /* when it last used CPU (or started) */
} kc_sandbox_watch;

/* 1 when the child has been asleep with no CPU used for stall_s. */
static int kc_sandbox_stalled(kc_sandbox_watch *w)
{
    char state = 0;
    unsigned long long ticks = 0;
    double now = kc_now();
    if (!kc_sandbox_child_cpu(w->pid, &state, &ticks) || state != 'S' || ticks != w->ticks) {
        w->ticks = ticks;
        w->progress_at = now;
        return 0;
    }
    return now - w->progress_at >= w->stall_s;
}

/* Read the child's message until EOF, the deadline (-1) or a stall (-2);
 * returns the bytes read. */
static ssize_t kc_sandbox_read_msg(int fd, char *buf, size_t cap, double deadline,
                                   kc_sandbox_watch *w)
{
    size_t got = 0;
    for (;;) {
        double left = deadline - kc_now();
        if (left <= 0)
            return -1;
        int wait_ms = (int)(left * 1000) + 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, wait_ms < KC_SANDBOX_POLL_MS ? wait_ms : KC_SANDBOX_POLL_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return (ssize_t)got;
        if (r == 0) {
            if (kc_sandbox_stalled(w))
                return -2;
            continue;
        }
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

/* The child's outcome; *stalled set (and KC_ERR_IO returned) when it
 * blocked without using the CPU. */
static kc_status kc_sandbox_wait(const char *label, const char *what, pid_t pid, int msg_fd,
                                 unsigned cpu_seconds, int *stalled)
{
    char msg[KC_SANDBOX_MSG_MAX + 1];
    /* Wall-clock deadline well above the CPU limit: a child blocked on I/O
     * is killed too. */
    double deadline = kc_now() + 2.0 * cpu_seconds + 10.0;
    kc_sandbox_watch watch = {.pid = pid, .stall_s = kc_sandbox_stall_seconds(),
                              .progress_at = kc_now()};
    ssize_t n = kc_sandbox_read_msg(msg_fd, msg, KC_SANDBOX_MSG_MAX, deadline, &watch);
    if (n < 0)
        kill(pid, SIGKILL);
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    *stalled = n == -2;
    if (*stalled)
        return KC_ERR_IO;
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

/* One fork of the work; *stalled set when the child blocked. */
static kc_status kc_sandbox_fork_once(const char *label, const char *what, kc_sandbox_work work,
                                      void *arg, unsigned cpu_seconds, int out_fd, int *stalled)
{
    *stalled = 0;
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0)
        return kc_fail(KC_ERR_IO, "%s: pipe: %s", label, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        return kc_fail(KC_ERR_IO, "%s: fork: %s", label, strerror(errno));
    }
    if (pid == 0) {
        close(pipe_fds[0]);
        kc_sandbox_child(pipe_fds[1], out_fd, work, arg, cpu_seconds);
    }
    close(pipe_fds[1]);
    kc_status st = kc_sandbox_wait(label, what, pid, pipe_fds[0], cpu_seconds, stalled);
    close(pipe_fds[0]);
    return st;
}

/* The work in a child, forked again (on an emptied out_fd) while a child
 * blocks without using the CPU, at most KC_SANDBOX_TRIES times. */
static kc_status kc_sandbox_fork(const char *label, const char *what, kc_sandbox_work work,
                                 void *arg, unsigned cpu_seconds, int out_fd)
{
    for (int attempt = 1; attempt <= KC_SANDBOX_TRIES; attempt++) {
        int stalled = 0;
        kc_status st = kc_sandbox_fork_once(label, what, work, arg, cpu_seconds, out_fd,
                                            &stalled);
        if (!stalled)
            return st;
        if (ftruncate(out_fd, 0) != 0 || lseek(out_fd, 0, SEEK_SET) != 0)
            return kc_fail(KC_ERR_IO, "%s: cannot empty the memory file: %s", label,
                           strerror(errno));
    }
    return kc_fail(KC_ERR_IO, "%s: %s blocked without using the CPU for %.0f s, %d times: "
                   "a lock held by another thread when it was forked (set KC_SANDBOX=0 to "
                   "parse in-process)", label, what, kc_sandbox_stall_seconds(), KC_SANDBOX_TRIES);
}

kc_status kc_sandbox_run(const char *label, const char *what, kc_sandbox_work work, void *arg,
                         unsigned cpu_seconds, int *fd_out)
{
    *fd_out = -1;
    int out_fd = kc_sandbox_memfd();
    if (out_fd < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot create a memory file: %s", label, strerror(errno));
    kc_status st = kc_sandbox_disabled() ? work(arg, out_fd)
                                         : kc_sandbox_fork(label, what, work, arg, cpu_seconds,
                                                           out_fd);
    if (st == KC_OK && lseek(out_fd, 0, SEEK_SET) != 0)
        st = kc_fail(KC_ERR_IO, "%s: lseek: %s", label, strerror(errno));
    if (st != KC_OK) {
        close(out_fd);
        return st;
    }
    *fd_out = out_fd;
    return KC_OK;
}
