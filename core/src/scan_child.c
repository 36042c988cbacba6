/*
 * Scanning one plugin file: load it, ask for its descriptor, validate it,
 * probe it, and describe the outcome as an encoded record.
 *
 * ah__scan_one does the work in the calling process. ah__scan_in_child runs
 * it in a forked child so that a plugin that crashes, hangs, aborts in a
 * constructor or calls exit() costs only the child: the parent reads the
 * record from a pipe under a deadline, kills the child's process group when
 * time runs out, and turns every way of dying into a quarantine reason with
 * the last lines the child wrote to stderr. The child's stdout goes to
 * /dev/null so a chatty plugin can neither block on a full pipe nor mix its
 * output into the host's.
 *
 * Forking a multithreaded host and then calling dlopen in the child relies
 * on glibc, which resets its malloc and loader locks in the child; the
 * in-process mode exists for environments where that is not acceptable.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "alloc.h"
#include "scan_int.h"

#define DEFAULT_TIMEOUT_MS 10000u
#define MAX_RECORD (16u << 20) /* a child sending more is sending garbage */
#define ERR_TAIL 4096u         /* bytes of the child's stderr kept */
#define ERR_LINES 5            /* lines of it quoted in a reason */

static const char *status_name(ah_status s)
{
    static const char *const n[] = {"ok", "invalid argument", "unsupported", "out of memory",
                                    "device error", "unavailable", "ABI mismatch",
                                    "configuration error", "I/O error", "plugin error",
                                    "not found", "internal error"};
    return (unsigned)s < AH_STATUS_COUNT ? n[s] : "unknown status";
}

static void terminate(char *s, size_t cap)
{
    s[cap - 1] = '\0';
}

/* Everything after a successful entry call: copy the descriptor, probe. */
static int describe(ah_plugin_rec *rec, const ah_plugin_descriptor *d, ah_host_services *svc,
                    void *svc_data)
{
    ah_caps caps;
    ah_plugin_ops ops;
    ah__caps_normalize(&caps, d->caps);
    ah__ops_normalize(&ops, d->ops);
    if (ah__rec_set(rec, &rec->info.name, d->name) ||
        ah__rec_set(rec, &rec->info.version, d->version) ||
        ah__rec_set(rec, &rec->info.vendor, d->vendor) ||
        ah__rec_set(rec, &rec->info.license, d->license) ||
        ah__rec_set(rec, &rec->info.description, d->description) || ah__rec_set_caps(rec, &caps))
        return -1;
    rec->info.device_kind = d->device_kind;
    rec->info.has_check_combination = caps.check_combination != NULL;
    ah__services_bind(svc_data, d->name, &caps);

    ah_probe_info *p = &rec->probe;
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    ah_status st = ops.probe(svc, p);
    p->struct_size = sizeof *p;
    terminate(p->reason, sizeof p->reason);
    terminate(p->device_name, sizeof p->device_name);
    terminate(p->arch, sizeof p->arch);
    terminate(p->driver_version, sizeof p->driver_version);
    p->usable = p->usable != 0;
    rec->info.probe = p;
    if (st != AH_OK) {
        p->usable = 0;
        char r[sizeof p->reason];
        snprintf(r, sizeof r, "probe failed (%s)%s%.200s", status_name(st), p->reason[0] ? ": " : "",
                 p->reason);
        memcpy(p->reason, r, sizeof r);
    } else if (!p->usable && !p->reason[0]) {
        snprintf(p->reason, sizeof p->reason, "probe says not usable here (no reason given)");
    }
    rec->info.state = p->usable ? AH_PLUGIN_AVAILABLE : AH_PLUGIN_UNAVAILABLE;
    return ah__rec_set(rec, &rec->info.reason, p->usable ? "" : p->reason);
}

void ah__scan_one(const char *path, const char *stem, const ah_config *config,
                  const ah_hw_facts *hw, int unload, ah_buf *b)
{
    ah_plugin_rec *rec = ah__rec_new();
    ah_host_services svc;
    void *svc_data = NULL;
    void *dl = NULL;
    int oom = 0;
    if (!rec || ah__rec_set(rec, &rec->info.path, path) || ah__rec_set(rec, &rec->info.name, stem)) {
        oom = 1;
        goto out;
    }
    rec->info.state = AH_PLUGIN_QUARANTINED;
    dlerror();
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        oom = ah__rec_reason(rec, "dlopen failed: %s", e ? e : "unknown error") != 0;
        goto out;
    }
    ah_plugin_entry_fn entry;
    void *sym = dlsym(dl, AH_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        oom = ah__rec_reason(rec, "no symbol " AH_PLUGIN_ENTRY_SYMBOL " in %s", path) != 0;
        goto out;
    }
    memcpy(&entry, &sym, sizeof entry);
    if (ah__services_init(&svc, &svc_data, stem, config, hw) != 0) {
        oom = 1;
        goto out;
    }
    const char *why = NULL;
    const ah_plugin_descriptor *d = entry(AH_ABI_VERSION, &svc, &why);
    rec->info.state = AH_PLUGIN_REJECTED;
    if (!d) {
        oom = ah__rec_reason(rec, "the plugin refused this host: %.512s",
                             why ? why : "(no reason given)") != 0;
        goto out;
    }
    char vwhy[512];
    if (ah__descriptor_validate(d, vwhy, sizeof vwhy) != 0) {
        oom = ah__rec_reason(rec, "%s", vwhy) != 0;
        goto out;
    }
    oom = describe(rec, d, &svc, svc_data) != 0;
out:
    if (!oom) ah__rec_encode(rec, b);
    if (oom) b->oom = 1;
    ah__rec_free(rec);
    if (unload && dl) dlclose(dl);
    if (svc_data) ah__services_free(svc_data);
}

/* ---- the child process ---------------------------------------------------------- */

const char *ah__signal_name(int sig, char *buf, size_t cap)
{
    static const struct {
        int sig;
        const char *name;
    } t[] = {{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGILL, "SIGILL"},   {SIGFPE, "SIGFPE"},
             {SIGABRT, "SIGABRT"}, {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGPIPE, "SIGPIPE"},
             {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
             {SIGHUP, "SIGHUP"},   {SIGALRM, "SIGALRM"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
             {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].sig == sig) return t[i].name;
    snprintf(buf, cap, "signal %d", sig);
    return buf;
}

static void write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static __attribute__((noreturn)) void child_main(const char *path, const char *stem,
                                                 const ah_scan_request *req, int rec_fd,
                                                 int err_fd, pid_t parent)
{
    setpgid(0, 0); /* one group to kill, grandchildren included */
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(112);
#else
    (void)parent;
#endif
    /* The host may have handlers (or an ignored SIGPIPE) a plugin crash
     * must not go through: the parent needs to see the real signal. */
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2) close(null);
    }
    dup2(err_fd, 2);
    close(err_fd);
    /* Only stdio and the record pipe (moved to 3) stay open: the host's
     * sockets and files must not be reachable from plugin code, which could
     * otherwise write into descriptions the host shares with the child. */
    if (rec_fd != 3) {
        if (dup2(rec_fd, 3) < 0) _exit(113);
        close(rec_fd);
        rec_fd = 3;
    }
    fcntl(rec_fd, F_SETFD, FD_CLOEXEC); /* not for whatever a plugin execs */
#if defined(SYS_close_range)
    if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
#endif
    {
        long max = sysconf(_SC_OPEN_MAX);
        for (long fd = 4; fd < (max > 0 && max < 65536 ? max : 65536); fd++) close((int)fd);
    }

    ah_buf b = {0};
    ah__scan_one(path, stem, req->config, req->hw, 0, &b);
    if (b.oom) {
        static const char msg[] = "attnhost scan child: out of memory\n";
        write_all(2, (const uint8_t *)msg, sizeof msg - 1);
        _exit(111);
    }
    write_all(rec_fd, b.p, b.len);
    _exit(0);
}

typedef struct tail {
    char buf[ERR_TAIL];
    size_t total; /* bytes ever written; buf holds the last min(total, ERR_TAIL) */
} tail;

static void tail_add(tail *t, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) t->buf[(t->total + i) % ERR_TAIL] = p[i];
    t->total += n;
}

/* The last ERR_LINES non-empty lines, joined with " | ", into out. */
static void tail_lines(const tail *t, char *out, size_t cap)
{
    size_t n = t->total < ERR_TAIL ? t->total : ERR_TAIL;
    char lin[ERR_TAIL + 1];
    for (size_t i = 0; i < n; i++) {
        char c = t->buf[(t->total - n + i) % ERR_TAIL];
        lin[i] = (c == '\0' || c == '\t') ? ' ' : c;
    }
    lin[n] = '\0';
    const char *starts[ERR_LINES];
    size_t lens[ERR_LINES];
    int found = 0;
    size_t end = n;
    while (found < ERR_LINES && end > 0) {
        while (end > 0 && (lin[end - 1] == '\n' || lin[end - 1] == '\r')) end--;
        if (!end) break;
        size_t s = end;
        while (s > 0 && lin[s - 1] != '\n') s--;
        starts[found] = lin + s;
        lens[found] = end - s;
        found++;
        end = s;
    }
    size_t o = 0;
    out[0] = '\0';
    for (int i = found - 1; i >= 0 && o + 4 < cap; i--) {
        size_t l = lens[i] > 200 ? 200 : lens[i];
        int w = snprintf(out + o, cap - o, "%s%.*s", o ? " | " : "", (int)l, starts[i]);
        if (w < 0) break;
        o += (size_t)w;
        if (o >= cap) o = cap - 1;
    }
}

/* Read what is there; returns 0 on EOF (fd done), 1 when more may come. */
static int drain(int fd, ah_buf *rec, tail *t)
{
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r > 0) {
            if (rec) {
                if (rec->len + (size_t)r > MAX_RECORD) {
                    rec->oom = 2; /* too large: marked, the bytes dropped */
                    continue;
                }
                ah__buf_put(rec, buf, (size_t)r);
            } else {
                tail_add(t, buf, (size_t)r);
            }
            continue;
        }
        if (r == 0) return 0;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : 0;
    }
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

ah_plugin_rec *ah__scan_in_child(const char *path, const char *stem, const ah_scan_request *req,
                                 int *cacheable)
{
    *cacheable = 1;
    uint32_t timeout = req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS;
    ah_plugin_rec *rec = NULL;
    int rp[2] = {-1, -1}, ep[2] = {-1, -1};
    char fail[512] = "";
    if (pipe2(rp, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(fail, sizeof fail, "cannot create a pipe for the scan child: %s", strerror(errno));
        goto quarantine_nochild;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(fail, sizeof fail, "cannot fork the scan child: %s", strerror(errno));
        goto quarantine_nochild;
    }
    if (pid == 0) {
        close(rp[0]);
        close(ep[0]);
        child_main(path, stem, req, rp[1], ep[1], parent);
    }
    close(rp[1]);
    close(ep[1]);
    rp[1] = ep[1] = -1;
    fcntl(rp[0], F_SETFL, O_NONBLOCK);
    fcntl(ep[0], F_SETFL, O_NONBLOCK);

    ah_buf out = {0};
    tail t;
    t.total = 0;
    int status = 0, reaped = 0, timed_out = 0, lost = 0;
    int rec_open = 1, err_open = 1;
    double deadline = ah__now_ms() + timeout;
    while (!reaped) {
        double now = ah__now_ms();
        if (now >= deadline || out.oom == 2) {
            timed_out = out.oom != 2;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            reaped = 1;
            break;
        }
        double wait = deadline - now < 50 ? deadline - now : 50;
        struct pollfd fds[2];
        nfds_t nf = 0;
        if (rec_open) fds[nf++] = (struct pollfd){rp[0], POLLIN, 0};
        if (err_open) fds[nf++] = (struct pollfd){ep[0], POLLIN, 0};
        if (nf)
            poll(fds, nf, (int)wait + 1);
        else /* both pipes closed: the child is exiting, reap it promptly */
            sleep_ms(wait < 0.2 ? wait : 0.2);
        if (rec_open) rec_open = drain(rp[0], &out, NULL);
        if (err_open) err_open = drain(ep[0], NULL, &t);
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) reaped = 1;
        if (w < 0 && errno == ECHILD) reaped = lost = 1; /* SIGCHLD ignored by the host */
    }
    /* A child that exited has closed its ends; read what is still buffered
     * (but never wait on a grandchild still holding the pipes). */
    if (rec_open) drain(rp[0], &out, NULL);
    if (err_open) drain(ep[0], NULL, &t);
    close(rp[0]);
    close(ep[0]);

    char sig[32];
    if (out.oom == 1) {
        ah__buf_free(&out);
        return NULL;
    }
    if (timed_out)
        snprintf(fail, sizeof fail, "timed out after %u ms (killed)", timeout);
    else if (out.oom == 2)
        snprintf(fail, sizeof fail, "garbage record: the child sent more than %u bytes",
                 MAX_RECORD);
    else if (!lost && WIFSIGNALED(status))
        snprintf(fail, sizeof fail, "killed by %s%s",
                 ah__signal_name(WTERMSIG(status), sig, sizeof sig),
                 WCOREDUMP(status) ? " (core dumped)" : "");
    else if (!lost && WIFEXITED(status) && (WEXITSTATUS(status) != 0 || out.len == 0))
        snprintf(fail, sizeof fail, "exited with status %d before reporting",
                 WEXITSTATUS(status));
    else if (out.len == 0)
        snprintf(fail, sizeof fail, "exited before reporting");
    else {
        char why[512];
        if (ah__rec_decode(out.p, out.len, &rec, why, sizeof why) == 0) {
            ah__buf_free(&out);
            return rec;
        }
        if (strcmp(why, "out of memory") == 0) {
            ah__buf_free(&out);
            return NULL;
        }
        snprintf(fail, sizeof fail, "garbage record from the scan child: %.400s", why);
    }
    ah__buf_free(&out);

    char lines[1024];
    tail_lines(&t, lines, sizeof lines);
    if (!(rec = ah__rec_new())) return NULL;
    rec->info.state = AH_PLUGIN_QUARANTINED;
    if (ah__rec_set(rec, &rec->info.path, path) || ah__rec_set(rec, &rec->info.name, stem) ||
        ah__rec_reason(rec, "%s%s%s", fail, lines[0] ? "; last stderr: " : "", lines)) {
        ah__rec_free(rec);
        return NULL;
    }
    return rec;

quarantine_nochild:
    *cacheable = 0;
    for (int i = 0; i < 2; i++) {
        if (rp[i] >= 0) close(rp[i]);
        if (ep[i] >= 0) close(ep[i]);
    }
    if (!(rec = ah__rec_new())) return NULL;
    rec->info.state = AH_PLUGIN_QUARANTINED;
    if (ah__rec_set(rec, &rec->info.path, path) || ah__rec_set(rec, &rec->info.name, stem) ||
        ah__rec_reason(rec, "%s", fail)) {
        ah__rec_free(rec);
        return NULL;
    }
    return rec;
}
