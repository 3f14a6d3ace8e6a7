/* syncshim: an LD_PRELOAD library that sees every fsync(2) and fdatasync(2) of a process
 * (and of its children, which inherit LD_PRELOAD), for two kinds of disk-fault tests.
 *
 * Recording (SYNCSHIM_ROOT, SYNCSHIM_RECORD): for each call on a file or folder below
 * ROOT, it appends one line to RECORD/events, and copies what the call made durable to
 * RECORD/data/PID-N: a file's whole content after a successful sync ("F"), its content
 * at a failed one ("X"), a folder's entries as "name\tkey\ttype" lines ("D"). A file is
 * named by its key "dev:ino:btime", unique even when an inode number is reused. From
 * these, tests/faults/powercut.py rebuilds the files as only the synced writes would
 * have left them after a power cut (the approach of ALICE and CrashMonkey).
 *
 * Failing (SYNCSHIM_FAIL="call:substring:nth[:count]"): the nth call (from 1) of
 * fsync or fdatasync (call "sync": either) on a path containing substring, and the
 * count-1 matching calls after it, return -1 with errno EIO without syncing anything (a
 * disk that reported a write error). Counting is per process.
 *
 * Crashing (SYNCSHIM_CRASH, the same form; call also "ftruncate"): the process kills
 * itself with SIGKILL just before the nth matching call, so a power cut lands exactly
 * between a write and its sync, where a kill at a random moment rarely does. With a
 * failing spec too, a process can die after a failed sync and before its cut.
 *
 * Slowing (SYNCSHIM_DELAY_US=N): every sync below ROOT waits N microseconds first, as
 * on network block storage, where a sync takes milliseconds (bench/many_writers.py).
 *
 * Writing and cutting (also recorded): each write(2), pwrite(2) or writev(2) to a file
 * below ROOT appends "W key POS:LEN path", and ftruncate(2) appends "T key SIZE path",
 * so the rebuild knows which bytes a failed sync left dirty, and which of them were
 * written again or cut off afterwards.
 *
 * Event line: "KIND key datafile path\n", written with one write(2) to a file opened
 * O_APPEND, so the lines of several processes never interleave.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/uio.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside;  /* the shim's own writes are not recorded */
static unsigned long counter;
static unsigned long matched, crash_matched;

int syncshim_key(const char *path, char *out, size_t n) {
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_BTIME, &sx) != 0)
        return -1;
    snprintf(out, n, "%u.%u:%llu:%lld.%09u", sx.stx_dev_major, sx.stx_dev_minor,
             (unsigned long long)sx.stx_ino, (long long)sx.stx_btime.tv_sec,
             sx.stx_btime.tv_nsec);
    return 0;
}

static int fd_key(int fd, char *out, size_t n) {
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &sx) != 0) return -1;
    snprintf(out, n, "%u.%u:%llu:%lld.%09u", sx.stx_dev_major, sx.stx_dev_minor,
             (unsigned long long)sx.stx_ino, (long long)sx.stx_btime.tv_sec,
             sx.stx_btime.tv_nsec);
    return 0;
}

static int fd_path(int fd, char *out, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, out, n - 1);
    if (len < 0) return -1;
    out[len] = 0;
    return 0;
}

static int below_root(const char *path) {
    const char *root = getenv("SYNCSHIM_ROOT");
    if (!root || !*root) return 0;
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == 0);
}

static int matches(const char *var, unsigned long *count, const char *call, const char *path) {
    const char *spec = getenv(var);
    if (!spec) return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    char *c = strtok_r(buf, ":", &save), *sub = strtok_r(NULL, ":", &save);
    char *nth = strtok_r(NULL, ":", &save), *times = strtok_r(NULL, ":", &save);
    if (!c || !sub || !nth) return 0;
    /* "sync": fsync or fdatasync, never ftruncate */
    int any_sync = strcmp(c, "sync") == 0 && strstr(call, "sync") != NULL;
    if (strcmp(c, call) != 0 && !any_sync) return 0;
    if (!strstr(path, sub)) return 0;
    unsigned long first = strtoul(nth, NULL, 10), n = times ? strtoul(times, NULL, 10) : 1;
    pthread_mutex_lock(&lock);
    unsigned long k = ++*count;
    pthread_mutex_unlock(&lock);
    return k >= first && k < first + n;
}

static void copy_fd(int fd, const char *dest) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int in = open(link, O_RDONLY | O_CLOEXEC);
    if (in < 0) return;
    int out = open(dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) {
        char buf[1 << 16];
        off_t pos = 0;
        ssize_t got;
        while ((got = pread(in, buf, sizeof buf, pos)) > 0) {
            if (write(out, buf, got) != got) break;
            pos += got;
        }
        close(out);
    }
    close(in);
}

static void list_dir(const char *path, const char *dest) {
    DIR *d = opendir(path);
    if (!d) return;
    FILE *out = fopen(dest, "we");
    if (out) {
        struct dirent *e;
        char child[PATH_MAX], key[128];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(child, &st) != 0 || syncshim_key(child, key, sizeof key) != 0) continue;
            fprintf(out, "%s\t%s\t%s\n", e->d_name, key, S_ISDIR(st.st_mode) ? "d" : "f");
        }
        fclose(out);
    }
    closedir(d);
}

/* One event line, appended with one write(2) to RECORD/events (O_APPEND), so the lines
 * of several processes never interleave. */
static void append_event(const char *dir, const char *line, int len) {
    char events[PATH_MAX];
    snprintf(events, sizeof events, "%s/events", dir);
    int ev = open(events, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (ev >= 0) {
        if (write(ev, line, len) != len) { /* the test sees a short record */ }
        close(ev);
    }
}

static void record(int fd, const char *path, int ok) {
    const char *dir = getenv("SYNCSHIM_RECORD");
    if (!dir || !*dir) return;
    char key[128], data[PATH_MAX], line[PATH_MAX * 2 + 256];
    struct stat st;
    if (fstat(fd, &st) != 0 || fd_key(fd, key, sizeof key) != 0) return;
    inside = 1;
    pthread_mutex_lock(&lock);
    unsigned long n = ++counter;
    pthread_mutex_unlock(&lock);
    snprintf(data, sizeof data, "%s/data/%d-%lu", dir, (int)getpid(), n);
    char kind = S_ISDIR(st.st_mode) ? 'D' : (ok ? 'F' : 'X');
    if (kind == 'D') {
        if (!ok) { inside = 0; return; }  /* a folder whose failed sync keeps its entries */
        list_dir(path, data);
    } else {
        copy_fd(fd, data);
    }
    int len = snprintf(line, sizeof line, "%c %s %s %s\n", kind, key, data, path);
    append_event(dir, line, len);
    inside = 0;
}

static int intercept(const char *call, int fd, int (*real)(int)) {
    char path[PATH_MAX];
    if (fd_path(fd, path, sizeof path) != 0 || !below_root(path)) return real(fd);
    if (matches("SYNCSHIM_CRASH", &crash_matched, call, path))
        kill(getpid(), SIGKILL);  /* the power goes out just before this sync */
    const char *delay = getenv("SYNCSHIM_DELAY_US");
    if (delay && *delay) usleep((useconds_t)strtoul(delay, NULL, 10));
    if (matches("SYNCSHIM_FAIL", &matched, call, path)) {
        record(fd, path, 0);
        errno = EIO;
        return -1;
    }
    int rc = real(fd);
    if (rc == 0) record(fd, path, 1);
    return rc;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return intercept("fsync", fd, real);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return intercept("fdatasync", fd, real);
}

static void record_cut(int fd, const char *path, off_t size) {
    const char *dir = getenv("SYNCSHIM_RECORD");
    char key[128], line[PATH_MAX + 256];
    if (!dir || !*dir || fd_key(fd, key, sizeof key) != 0) return;
    int len = snprintf(line, sizeof line, "T %s %lld %s\n", key, (long long)size, path);
    append_event(dir, line, len);
}

static int cut(const char *name, int fd, off_t size) {
    int (*real)(int, off_t) = (int (*)(int, off_t))dlsym(RTLD_NEXT, name);
    char path[PATH_MAX];
    if (fd_path(fd, path, sizeof path) != 0 || !below_root(path)) return real(fd, size);
    if (matches("SYNCSHIM_CRASH", &crash_matched, "ftruncate", path))
        kill(getpid(), SIGKILL);  /* dies before the cut: e.g. after a failed sync */
    int rc = real(fd, size);
    if (rc == 0) record_cut(fd, path, size);
    return rc;
}

int ftruncate(int fd, off_t size) { return cut("ftruncate", fd, size); }

int ftruncate64(int fd, off_t size) { return cut("ftruncate64", fd, size); }

static void record_write(int fd, off_t pos, ssize_t len) {
    const char *dir = getenv("SYNCSHIM_RECORD");
    char path[PATH_MAX], key[128], line[PATH_MAX + 256];
    if (inside || len <= 0 || !dir || !*dir) return;
    inside = 1;
    struct stat st;
    if (fd_path(fd, path, sizeof path) == 0 && below_root(path) && fstat(fd, &st) == 0 &&
        S_ISREG(st.st_mode) && fd_key(fd, key, sizeof key) == 0) {
        int n = snprintf(line, sizeof line, "W %s %lld:%lld %s\n", key, (long long)pos,
                         (long long)len, path);
        append_event(dir, line, n);
    }
    inside = 0;
}

static off_t position(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : -1;
    }
    return lseek(fd, 0, SEEK_CUR);
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (inside || !getenv("SYNCSHIM_RECORD")) return real(fd, buf, n);
    off_t pos = position(fd);
    ssize_t rc = real(fd, buf, n);
    if (pos >= 0) record_write(fd, pos, rc);
    return rc;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    static ssize_t (*real)(int, const struct iovec *, int);
    if (!real) real = (ssize_t (*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    if (inside || !getenv("SYNCSHIM_RECORD")) return real(fd, iov, cnt);
    off_t pos = position(fd);
    ssize_t rc = real(fd, iov, cnt);
    if (pos >= 0) record_write(fd, pos, rc);
    return rc;
}

static ssize_t positioned(const char *name, int fd, const void *buf, size_t n, off_t off) {
    ssize_t (*real)(int, const void *, size_t, off_t) =
        (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, name);
    ssize_t rc = real(fd, buf, n, off);
    record_write(fd, off, rc);
    return rc;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    return positioned("pwrite", fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    return positioned("pwrite64", fd, buf, n, off);
}
