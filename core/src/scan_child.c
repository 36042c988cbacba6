/*
 * Scanning one plugin file: load it, ask for its descriptor, validate it,
 * probe it, and describe the outcome as an encoded record.
 *
 * ah__scan_one does the work in the calling process. ah__scan_in_child runs
 * it in a child process so that a plugin that crashes, hangs, aborts in a
 * constructor or calls exit() costs only the child: the parent reads the
 * record from a pipe under a deadline, kills the child's process group when
 * time runs out, and turns every way of dying into a quarantine reason with
 * the last lines the child wrote to stderr. The child's stdout goes to
 * /dev/null so a chatty plugin can neither block on a full pipe nor mix its
 * output into the host's.
 *
 * The child is normally a fresh process: the plugin scanner executable
 * (attnhost-plugin-scanner, installed in <libexecdir>/attnhost), started
 * with posix_spawn and given the request (hardware facts, plugin keys) on
 * its stdin. A fork of the host would inherit state that is not valid in a
 * fork: a process that initialised CUDA cannot use it in its forked
 * children, so its GPU plugins would probe as unusable. The scanner's main
 * (ah__scanner_main) runs the very same child code as the fork does.
 *
 * Without a scanner (a broken install; the caller warns) the child is a
 * fork of the host. That relies on glibc resetting its malloc and loader
 * locks in the child of a multithreaded process; the in-process mode exists
 * for environments where neither is acceptable.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "alloc.h"
#include "library_dir.h"
#include "scan_int.h"

#define DEFAULT_TIMEOUT_MS 10000u
#define MAX_RECORD (16u << 20) /* a child sending more is sending garbage */
#define ERR_TAIL 4096u         /* bytes of the child's stderr kept */
#define ERR_LINES 5            /* lines of it quoted in a reason */

static const char *status_name(ah_status s)
{
    static const char *const n[] = {
        "ok",           "invalid argument", "unsupported",  "out of memory",
        "device error", "unavailable",      "ABI mismatch", "configuration error",
        "I/O error",    "plugin error",     "not found",    "internal error"};
    return (unsigned)s < AH_STATUS_COUNT ? n[s] : "unknown status";
}

static void terminate(char *s, size_t cap) { s[cap - 1] = '\0'; }

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
        snprintf(r, sizeof r, "probe failed (%s)%s%.200s", status_name(st),
                 p->reason[0] ? ": " : "", p->reason);
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
    if (!rec || ah__rec_set(rec, &rec->info.path, path) ||
        ah__rec_set(rec, &rec->info.name, stem)) {
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

/* Close every descriptor from lo up: the host's sockets and files must not
 * be reachable from plugin code, which could otherwise write into
 * descriptions the host shares with the child. */
static void close_from(unsigned lo)
{
#if defined(SYS_close_range)
    if (syscall(SYS_close_range, lo, ~0u, 0u) == 0) return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = lo; fd < (max > 0 && max < 65536 ? max : 65536); fd++) close((int)fd);
}

/* First thing in a child, forked or spawned: its own process group (one
 * group to kill, grandchildren included), death with its parent, default
 * signal dispositions and an empty mask (the host may have handlers, or an
 * ignored SIGPIPE, a plugin crash must not go through: the parent needs to
 * see the real signal). */
static void child_guard(pid_t parent)
{
    setpgid(0, 0);
#if defined(__linux__)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(112);
#else
    (void)parent;
#endif
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
}

/* Then the descriptors: stdin and stdout on /dev/null, stderr on err_fd,
 * the record pipe on 3 (close-on-exec: not for whatever a plugin execs),
 * nothing else. */
static void child_fds(int rec_fd, int err_fd)
{
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2) close(null);
    }
    if (err_fd != 2) {
        dup2(err_fd, 2);
        close(err_fd);
    }
    if (rec_fd != 3) {
        if (dup2(rec_fd, 3) < 0) _exit(113);
        close(rec_fd);
    }
    fcntl(3, F_SETFD, FD_CLOEXEC);
    close_from(4);
}

/* Then the scan itself, the record on fd 3, and exit. */
static __attribute__((noreturn)) void child_scan(const char *path, const char *stem,
                                                 const ah_config *config, const ah_hw_facts *hw)
{
    ah_buf b = {0};
    ah__scan_one(path, stem, config, hw, 0, &b);
    if (b.oom) {
        static const char msg[] = "attnhost scan child: out of memory\n";
        write_all(2, (const uint8_t *)msg, sizeof msg - 1);
        _exit(111);
    }
    write_all(3, b.p, b.len);
    _exit(0);
}

/* ---- the spawned scanner -------------------------------------------------------- */

#define MAX_REQUEST (16u << 20)
#define SCANNER_NAME "attnhost-plugin-scanner"

static __attribute__((noreturn)) void scanner_refuse(const char *fmt, const char *detail)
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg, SCANNER_NAME ": ");
    n += snprintf(msg + n, sizeof msg - (size_t)n, fmt, detail);
    if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    write_all(2, (const uint8_t *)msg, (size_t)n);
    _exit(AH__SCANNER_BAD_REQUEST);
}

int ah__scanner_main(int argc, char **argv)
{
    if (argc != 5 || strcmp(argv[1], AH__SCANNER_ARG) != 0)
        scanner_refuse("%s", "not meant to be run by hand: attnhost starts it to load and probe "
                             "one plugin (usage: " SCANNER_NAME " " AH__SCANNER_ARG
                             " <parent pid> <plugin> <name>, request on stdin)");
    char *end = NULL;
    long parent = strtol(argv[2], &end, 10);
    if (!*argv[2] || *end || parent <= 0) scanner_refuse("bad parent pid '%s'", argv[2]);
    close_from(4); /* whatever the host let leak through exec */
    child_guard((pid_t)parent);

    ah_buf req = {0};
    for (;;) {
        uint8_t chunk[16384];
        ssize_t r = read(0, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) scanner_refuse("cannot read the request: %s", strerror(errno));
        if (r == 0) break;
        if (req.len + (size_t)r > MAX_REQUEST) scanner_refuse("%s", "request too large");
        ah__buf_put(&req, chunk, (size_t)r);
    }
    if (req.oom) scanner_refuse("%s", "out of memory reading the request");
    ah_config config;
    ah_hw_facts hw;
    char why[512];
    if (ah__scan_req_decode(req.p, req.len, &config, &hw, why, sizeof why) != 0)
        scanner_refuse("%s (a library and a scanner from different builds?)", why);
    ah__buf_free(&req);
    ah__hw_facts_claim(&hw);
    child_fds(3, 2);
    child_scan(argv[3], argv[4], &config, &hw);
}

char *ah__scanner_locate(char *tried, size_t cap)
{
    char *dir = ah__library_dir();
    char *c[3] = {NULL, NULL, NULL};
    if (dir) {
        /* the install layout (libdir to libexecdir, as configured), and the
         * build tree's <build>/lib (or bin) next to <build>/libexec */
        c[0] = ah__asprintf("%s/%s/" SCANNER_NAME, dir, ATTNHOST_SCANNER_RELDIR);
        c[1] = ah__asprintf("%s/../libexec/attnhost/" SCANNER_NAME, dir);
    }
    c[2] = ah__strdup(ATTNHOST_INSTALL_SCANNER);
    ah__free(dir);
    char *found = NULL;
    size_t o = 0;
    if (cap) tried[0] = '\0';
    for (int i = 0; i < 3 && !found; i++) {
        if (c[i] && access(c[i], X_OK) == 0) {
            found = c[i];
            c[i] = NULL;
            break;
        }
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= c[i] && c[j] && strcmp(c[i], c[j]) == 0;
        if (c[i] && !dup && o < cap) {
            int w = snprintf(tried + o, cap - o, "%s%s", o ? ", " : "", c[i]);
            o = w < 0 ? cap : o + (size_t)w;
        }
    }
    for (int i = 0; i < 3; i++) ah__free(c[i]);
    return found;
}

/* ---- the parent's side ---------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int rec, err; /* read ends */
    int req;      /* write end of the request socket, -1 when done */
    ah_buf msg;   /* the request */
    size_t sent;
} child;

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static int start_fork(child *c, const char *path, const char *stem, const ah_scan_request *req,
                      char *fail, size_t cap)
{
    int rp[2] = {-1, -1}, ep[2] = {-1, -1};
    if (pipe2(rp, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(fail, cap, "cannot create a pipe for the scan child: %s", strerror(errno));
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(fail, cap, "cannot fork the scan child: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        close(rp[0]);
        close(ep[0]);
        child_guard(parent);
        child_fds(rp[1], ep[1]);
        child_scan(path, stem, req->config, req->hw);
    }
    close(rp[1]);
    close(ep[1]);
    c->pid = pid;
    c->rec = rp[0];
    c->err = ep[0];
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        close_fd(&rp[i]);
        close_fd(&ep[i]);
    }
    return -1;
}

/* posix_spawn the scanner: no shell, no fork of this process's memory (a
 * process that initialised a GPU runtime cannot use it in a fork), the
 * request on a socket (send can then refuse SIGPIPE), stderr and the
 * record on pipes. Returns 0, or -1 with fail set and *no_scanner when the
 * executable itself could not be started. */
static int start_spawn(child *c, const char *scanner, const char *path, const char *stem,
                       const ah_scan_request *req, char *fail, size_t cap, int *no_scanner)
{
    int rp[2] = {-1, -1}, ep[2] = {-1, -1}, sp[2] = {-1, -1}, hi[3] = {-1, -1, -1};
    int rc = -1, fa_ok = 0, at_ok = 0;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    ah__scan_req_encode(req->config, req->hw, &c->msg);
    if (c->msg.oom) {
        snprintf(fail, cap, "out of memory encoding the scan request");
        goto out;
    }
    if (pipe2(rp, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        snprintf(fail, cap, "cannot create a pipe for the plugin scanner: %s", strerror(errno));
        goto out;
    }
    /* The child's ends out of the way of 0-3, so no dup2 below is a no-op
     * that would leave close-on-exec set. */
    int src[3] = {sp[1], ep[1], rp[1]};
    for (int i = 0; i < 3; i++)
        if ((hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 10)) < 0) {
            snprintf(fail, cap, "cannot set up the plugin scanner's descriptors: %s",
                     strerror(errno));
            goto out;
        }
    if ((errno = posix_spawn_file_actions_init(&fa)) != 0) goto spawn_fail;
    fa_ok = 1;
    if ((errno = posix_spawn_file_actions_adddup2(&fa, hi[0], 0)) != 0 ||
        (errno = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0)) != 0 ||
        (errno = posix_spawn_file_actions_adddup2(&fa, hi[1], 2)) != 0 ||
        (errno = posix_spawn_file_actions_adddup2(&fa, hi[2], 3)) != 0)
        goto spawn_fail;
    if ((errno = posix_spawnattr_init(&at)) != 0) goto spawn_fail;
    at_ok = 1;
    sigset_t def, none;
    sigfillset(&def);
    sigdelset(&def, SIGKILL);
    sigdelset(&def, SIGSTOP);
    sigemptyset(&none);
    if ((errno = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                   POSIX_SPAWN_SETSIGMASK)) != 0 ||
        (errno = posix_spawnattr_setpgroup(&at, 0)) != 0 ||
        (errno = posix_spawnattr_setsigdefault(&at, &def)) != 0 ||
        (errno = posix_spawnattr_setsigmask(&at, &none)) != 0)
        goto spawn_fail;
    char parent[32];
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    char *argv[] = {
        (char *)scanner, (char *)AH__SCANNER_ARG, parent, (char *)path, (char *)stem, NULL};
    pid_t pid;
    extern char **environ;
    int e = posix_spawn(&pid, scanner, &fa, &at, argv, environ);
    if (e != 0) {
        *no_scanner = 1;
        snprintf(fail, cap, "cannot start the plugin scanner %s: %s", scanner, strerror(e));
        goto out;
    }
    c->pid = pid;
    c->rec = rp[0];
    c->err = ep[0];
    c->req = sp[0];
    rp[0] = ep[0] = sp[0] = -1;
    rc = 0;
    goto out;
spawn_fail:
    snprintf(fail, cap, "cannot spawn the plugin scanner: %s", strerror(errno));
out:
    if (fa_ok) posix_spawn_file_actions_destroy(&fa);
    if (at_ok) posix_spawnattr_destroy(&at);
    for (int i = 0; i < 3; i++) close_fd(&hi[i]);
    for (int i = 0; i < 2; i++) {
        close_fd(&rp[i]);
        close_fd(&ep[i]);
        close_fd(&sp[i]);
    }
    return rc;
}

/* Send what the socket takes now; the request done (or refused: the child
 * is gone, its exit status will say how), close it so the child sees EOF. */
static void send_request(child *c)
{
    while (c->req >= 0 && c->sent < c->msg.len) {
        ssize_t w = send(c->req, c->msg.p + c->sent, c->msg.len - c->sent, MSG_NOSIGNAL);
        if (w > 0) {
            c->sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        break;
    }
    close_fd(&c->req);
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
    struct timespec ts = {(time_t)(ms / 1000),
                          (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

/* The scanner, not the plugin, failed: it exited refusing the request
 * (its own message on stderr), or the dynamic loader could not start it. */
static int scanner_broken(const char *scanner, int status, size_t rec_len, const tail *t)
{
    if (!scanner || rec_len || !WIFEXITED(status)) return 0;
    char lines[1024];
    tail_lines(t, lines, sizeof lines);
    if (WEXITSTATUS(status) == AH__SCANNER_BAD_REQUEST)
        return strstr(lines, SCANNER_NAME ": ") != NULL;
    if (WEXITSTATUS(status) == 127)
        return strstr(lines, "error while loading shared libraries") != NULL;
    return 0;
}

static ah_plugin_rec *quarantine(const char *path, const char *stem, const char *fail,
                                 const char *lines)
{
    ah_plugin_rec *rec = ah__rec_new();
    if (!rec) return NULL;
    rec->info.state = AH_PLUGIN_QUARANTINED;
    if (ah__rec_set(rec, &rec->info.path, path) || ah__rec_set(rec, &rec->info.name, stem) ||
        ah__rec_reason(rec, "%s%s%s", fail, lines[0] ? "; last stderr: " : "", lines)) {
        ah__rec_free(rec);
        return NULL;
    }
    return rec;
}

ah_plugin_rec *ah__scan_in_child(const char *path, const char *stem, const ah_scan_request *req,
                                 const char *scanner, int *flags)
{
    *flags = 0;
    uint32_t timeout = req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS;
    ah_plugin_rec *rec = NULL;
    char fail[1024] = "";
    child c = {-1, -1, -1, -1, {0}, 0};
    int no_scanner = 0;
    int started = scanner
                      ? start_spawn(&c, scanner, path, stem, req, fail, sizeof fail, &no_scanner)
                      : start_fork(&c, path, stem, req, fail, sizeof fail);
    if (started != 0) {
        ah__buf_free(&c.msg);
        *flags = AH__SCAN_HOST_FAILURE | (no_scanner ? AH__SCAN_NO_SCANNER : 0);
        return quarantine(path, stem, fail, "");
    }
    pid_t pid = c.pid;
    fcntl(c.rec, F_SETFL, O_NONBLOCK);
    fcntl(c.err, F_SETFL, O_NONBLOCK);
    if (c.req >= 0) {
        fcntl(c.req, F_SETFL, O_NONBLOCK);
        send_request(&c);
    }

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
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            reaped = 1;
            break;
        }
        double wait = deadline - now < 50 ? deadline - now : 50;
        struct pollfd fds[3];
        nfds_t nf = 0;
        if (rec_open) fds[nf++] = (struct pollfd){c.rec, POLLIN, 0};
        if (err_open) fds[nf++] = (struct pollfd){c.err, POLLIN, 0};
        if (c.req >= 0) fds[nf++] = (struct pollfd){c.req, POLLOUT, 0};
        if (nf) poll(fds, nf, (int)wait + 1);
        else /* both pipes closed: the child is exiting, reap it promptly */
            sleep_ms(wait < 0.2 ? wait : 0.2);
        if (c.req >= 0) send_request(&c);
        if (rec_open) rec_open = drain(c.rec, &out, NULL);
        if (err_open) err_open = drain(c.err, NULL, &t);
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) reaped = 1;
        if (w < 0 && errno == ECHILD) reaped = lost = 1; /* SIGCHLD ignored by the host */
    }
    /* A child that exited has closed its ends; read what is still buffered
     * (but never wait on a grandchild still holding the pipes). */
    if (rec_open) drain(c.rec, &out, NULL);
    if (err_open) drain(c.err, NULL, &t);
    close_fd(&c.rec);
    close_fd(&c.err);
    close_fd(&c.req);
    ah__buf_free(&c.msg);

    char sig[32];
    if (out.oom == 1) {
        ah__buf_free(&out);
        return NULL;
    }
    if (!lost && !timed_out && out.oom != 2 && scanner_broken(scanner, status, out.len, &t)) {
        *flags = AH__SCAN_HOST_FAILURE | AH__SCAN_NO_SCANNER;
        snprintf(fail, sizeof fail, "the plugin scanner %s failed (exit status %d)", scanner,
                 WEXITSTATUS(status));
    } else if (timed_out) snprintf(fail, sizeof fail, "timed out after %u ms (killed)", timeout);
    else if (out.oom == 2)
        snprintf(fail, sizeof fail, "garbage record: the child sent more than %u bytes",
                 MAX_RECORD);
    else if (!lost && WIFSIGNALED(status))
        snprintf(fail, sizeof fail, "killed by %s%s",
                 ah__signal_name(WTERMSIG(status), sig, sizeof sig),
                 WCOREDUMP(status) ? " (core dumped)" : "");
    else if (!lost && WIFEXITED(status) && (WEXITSTATUS(status) != 0 || out.len == 0))
        snprintf(fail, sizeof fail, "exited with status %d before reporting", WEXITSTATUS(status));
    else if (out.len == 0) snprintf(fail, sizeof fail, "exited before reporting");
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
    return quarantine(path, stem, fail, lines);
}
