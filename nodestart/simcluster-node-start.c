/*
 * simcluster-node-start: start a local virtual node's daemon (slurmd, under tini) in the
 * node's namespaces, in one process.
 *
 * It does what this chain of standard programs does (provisioner/providers/local/names.py,
 * namespace_prefix), which is what `up` runs where this program is not built:
 *
 *   nsenter --net=NETNS  sh -c 'echo $$ > <cgroup>/cgroup.procs ...; exec "$@"'
 *     [nsenter --cgroup=CGROUPNS]  (cgroup v2: the node's namespace exists; else unshare --cgroup)
 *     unshare --cgroup --mount --uts --pid --fork --kill-child --mount-proc --propagation private
 *       tini -- sh -c 'mount -a -T FSTAB; hostname NODE; mount -t tmpfs ... SPOOL/NODE; exec "$@"'
 *         slurmd -D -N NODE ...
 *
 * Seven programs are loaded per node there, and mount(8) parses the machine's whole mount
 * table (every node's network namespace is a mount in it) for each of its mounts; at 1024
 * nodes that chain cost more CPU than slurmd's own start. Here: the same system calls, in
 * the same order, from one small program. With --init it is also the node's pid 1 itself,
 * doing tini's work (reaping, passing signals on to the daemon, ending as the daemon does):
 * one program fewer to load per node (~2 ms of CPU: 2 s of a 1024-node `up`). The node's
 * processes are then the outer process, this program as pid 1, and slurmd; without --init,
 * INIT (tini) is exec'd as pid 1, as the chain does.
 *
 * Usage:
 *   simcluster-node-start [--net NETNS_FILE] [--cgroup-procs FILE]... [--cgroupns NS_FILE]
 *                         [--outer-cgroup-procs FILE] [--fstab FILE] [--hostname NAME] [--tmpfs DIR] -- INIT [ARG...]
 *   simcluster-node-start [the same options] --init -- DAEMON [ARG...]
 *
 * --fresh-boottime: the node also gets a time namespace of its own (Linux >= 5.6) whose
 * CLOCK_BOOTTIME starts at 0, as a host's does when it boots: sysinfo()'s uptime (which
 * slurmd reports, and from which slurmctld knows when a node rebooted) and /proc/uptime
 * count from this start. The chain does the same with `unshare --time --boottime`.
 *
 * The fstab holds what provisioner/providers/local/names.py node_fstab writes: bind mounts
 * ("SRC DST none bind 0 0") and filesystems with flags and data ("simcluster-cgroup
 * /sys/fs/cgroup/memory cgroup rw,memory,X-mount.mkdir 0 0"); an option it does not know
 * is passed to the kernel as data, as mount(8) does.
 *
 * --cgroupns: enter the cgroup namespace kept at NS_FILE once the cgroups are joined (cgroup
 * v2, where it is made with the node's cgroup: provisioner/providers/local/cgroups.py);
 * without it, --cgroup-procs makes a new one rooted where the process then is. The node's
 * mount namespace then also drops the host's /sys/fs/cgroup (a lazy unmount) before the
 * fstab mounts the node's own there: Slurm 24.11's cgroup/v2 takes the first cgroup2 line of
 * /proc/1/mountinfo for its mount and stops ("cgroup mountpoint does not align with the
 * current namespace") where that is the host's.
 *
 * --outer-cgroup-procs: the cgroup the outer process (outside the node's pid namespace)
 * moves to once pid 1 is forked, so that the node's pid 1 and daemon are alone in the
 * cgroups of --cgroup-procs (Slurm 24.11 refuses a cgroup that holds processes from
 * outside its pid namespace). Opened before the fork: pid 1 mounts over its path.
 *
 * Errors: one line on stderr (the daemon's log) naming what failed, exit 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROG "simcluster-node-start"
#define MAX_CGROUPS 32
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static void die(const char *what, const char *arg)
{
	fprintf(stderr, PROG ": %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
	exit(1);
}

static void usage(const char *why)
{
	fprintf(stderr, PROG ": %s\nusage: " PROG " [--net NETNS_FILE] [--cgroup-procs FILE]... "
		"[--cgroupns NS_FILE] [--outer-cgroup-procs FILE] [--fstab FILE] [--hostname NAME] [--tmpfs DIR] [--fresh-boottime] [--init] -- INIT|DAEMON [ARG...]\n", why);
	exit(2);
}

/* fstab's escapes: \040 is a space, as mount(8) reads them. */
static void unescape(char *s)
{
	char *out = s;
	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*out++ = *s++;
		}
	}
	*out = '\0';
}

static void mkdirs(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		errno = ENAMETOOLONG;
		die("mkdir", path);
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			die("mkdir", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		die("mkdir", buf);
}

/* One fstab entry: options split into mount flags, mkdir and the data string. */
static void mount_entry(char *src, char *dst, char *type, char *opts, const char *fstab, int lineno)
{
	unsigned long flags = 0;
	int make_dir = 0;
	char data[1024] = "";
	char where[4200];
	snprintf(where, sizeof where, "%s (%s line %d)", dst, fstab, lineno);
	for (char *save = NULL, *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		if (!strcmp(o, "bind"))
			flags |= MS_BIND;
		else if (!strcmp(o, "rbind"))
			flags |= MS_BIND | MS_REC;
		else if (!strcmp(o, "ro"))
			flags |= MS_RDONLY;
		else if (!strcmp(o, "nosuid"))
			flags |= MS_NOSUID;
		else if (!strcmp(o, "nodev"))
			flags |= MS_NODEV;
		else if (!strcmp(o, "noexec"))
			flags |= MS_NOEXEC;
		else if (!strcmp(o, "X-mount.mkdir") || !strncmp(o, "X-mount.mkdir=", 14))
			make_dir = 1;
		else if (!strcmp(o, "rw") || !strcmp(o, "defaults") || !strncmp(o, "X-", 2) || !strncmp(o, "x-", 2))
			continue; /* rw is the default; X-/x- options are mount(8)'s own, never the kernel's */
		else {
			size_t len = strlen(data);
			if (len + strlen(o) + 2 > sizeof data) {
				errno = E2BIG;
				die("mount options of", where);
			}
			snprintf(data + len, sizeof data - len, "%s%s", len ? "," : "", o);
		}
	}
	if (make_dir)
		mkdirs(dst);
	if (mount(src, dst, (flags & MS_BIND) ? NULL : type, flags, (flags & MS_BIND) ? NULL : data))
		die("mount", where);
}

static void mount_fstab(const char *fstab)
{
	FILE *f = fopen(fstab, "re");
	char line[8192];
	int lineno = 0;
	if (!f)
		die("open", fstab);
	while (fgets(line, sizeof line, f)) {
		char *fields[4], *save = NULL;
		int n = 0;
		lineno++;
		for (char *t = strtok_r(line, " \t\n", &save); t && n < 4; t = strtok_r(NULL, " \t\n", &save))
			fields[n++] = t;
		if (n == 0 || fields[0][0] == '#')
			continue;
		if (n < 4) {
			fprintf(stderr, PROG ": %s line %d: not 'SOURCE TARGET TYPE OPTIONS'\n", fstab, lineno);
			exit(1);
		}
		for (int i = 0; i < 4; i++)
			unescape(fields[i]);
		mount_entry(fields[0], fields[1], fields[2], fields[3], fstab, lineno);
	}
	fclose(f);
}

static void write_pid(const char *file)
{
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	char buf[32];
	int len = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
	if (fd < 0 || write(fd, buf, (size_t)len) != len)
		die("joining cgroup", file);
	close(fd);
}

/* Set the boot-time offset of the time namespace that unshare(CLONE_NEWTIME) made for this
 * process's children (before any process is in it, as the kernel requires): minus the whole
 * seconds this host has been up, so the node's uptime starts near 0 (never below: the kernel
 * refuses an offset that would make the clock negative). */
static void fresh_boottime(void)
{
	struct timespec now;
	char buf[64];
	if (clock_gettime(CLOCK_BOOTTIME, &now))
		die("clock_gettime", "CLOCK_BOOTTIME");
	int len = snprintf(buf, sizeof buf, "boottime %lld 0\n", -(long long)now.tv_sec);
	int fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, buf, (size_t)len) != len)
		die("setting the boot time offset", "/proc/self/timens_offsets");
	close(fd);
}

static pid_t child;

static void forward(int sig)
{
	if (child > 0)
		kill(child, sig);
}

/* The signals passed on: by the outer process to pid 1, by pid 1 (--init) to the daemon. */
static void forward_signals(void)
{
	struct sigaction sa = {0};
	sa.sa_handler = forward;
	int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	for (unsigned k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
		sigaction(sigs[k], &sa, NULL);
}

/* pid 1 of the node (--init), as tini is without it: the daemon is its child; it reaps every
 * process that ends in the namespace (slurmd double-forks its step daemons and never waits
 * for them: they are re-parented here), passes the signals it gets on to the daemon, and
 * ends as the daemon ends (the kernel then kills what is left in the namespace). A pid 1
 * gets no signal it has no handler for, except SIGKILL from outside the namespace. */
static void be_init(char **prog)
{
	child = 0;  /* until the daemon runs: a signal is dropped, not sent to pid 0's group */
	forward_signals();
	pid_t daemon = fork();
	if (daemon < 0)
		die("fork", NULL);
	if (daemon == 0) {
		execvp(prog[0], prog);  /* exec resets the handlers */
		die("exec", prog[0]);
	}
	child = daemon;
	for (;;) {
		int status;
		pid_t pid = wait(&status);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			die("wait", NULL);  /* ECHILD: the daemon is gone without our seeing it end */
		}
		if (pid == daemon)
			exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
	}
}

int main(int argc, char **argv)
{
	const char *net = NULL, *fstab = NULL, *hostname = NULL, *tmpfs = NULL, *cgroupns = NULL;
	const char *outer_procs = NULL;
	const char *cgroups[MAX_CGROUPS];
	int ncgroups = 0, self_init = 0, new_boottime = 0, i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		if (!strcmp(a, "--init")) {
			self_init = 1;
			continue;
		}
		if (!strcmp(a, "--fresh-boottime")) {
			new_boottime = 1;
			continue;
		}
		if (i + 1 >= argc)
			usage("an option without its value");
		if (!strcmp(a, "--net"))
			net = argv[++i];
		else if (!strcmp(a, "--fstab"))
			fstab = argv[++i];
		else if (!strcmp(a, "--hostname"))
			hostname = argv[++i];
		else if (!strcmp(a, "--tmpfs"))
			tmpfs = argv[++i];
		else if (!strcmp(a, "--cgroupns"))
			cgroupns = argv[++i];
		else if (!strcmp(a, "--outer-cgroup-procs"))
			outer_procs = argv[++i];
		else if (!strcmp(a, "--cgroup-procs")) {
			if (ncgroups == MAX_CGROUPS)
				usage("too many --cgroup-procs");
			cgroups[ncgroups++] = argv[++i];
		} else
			usage("unknown option");
	}
	if (i + 1 >= argc)
		usage("no program after --");
	char **prog = argv + i + 1;

	if (net) {
		int fd = open(net, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET))
			die("joining network namespace", net);
		close(fd);
	}
	/* The cgroups first: the cgroup namespace is rooted where the process is when it is made. */
	for (int c = 0; c < ncgroups; c++)
		write_pid(cgroups[c]);
	if (cgroupns) {
		int fd = open(cgroupns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWCGROUP))
			die("joining cgroup namespace", cgroupns);
		close(fd);
	}
	if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWPID | (ncgroups && !cgroupns ? CLONE_NEWCGROUP : 0) |
		    (new_boottime ? CLONE_NEWTIME : 0)))
		die("unshare", NULL);
	if (new_boottime)
		fresh_boottime();
	if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL))
		die("making mounts private", NULL);

	int outer_fd = -1;
	if (outer_procs && (outer_fd = open(outer_procs, O_WRONLY | O_CLOEXEC)) < 0)
		die("opening", outer_procs);
	child = fork();
	if (child < 0)
		die("fork", NULL);
	if (child == 0) {
		/* pid 1 of the node: it dies with the outer process, as with unshare --kill-child. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL))
			die("prctl", NULL);
		if (mount("none", "/proc", NULL, MS_PRIVATE | MS_REC, NULL) ||
		    mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL))
			die("mount", "/proc");
		/* The host's cgroup2 mount out of the node's view (see --cgroupns above); none is
		 * there on some hosts, so a failure is no error. */
		if (cgroupns)
			umount2("/sys/fs/cgroup", MNT_DETACH);
		if (fstab)
			mount_fstab(fstab);
		if (hostname && sethostname(hostname, strlen(hostname)))
			die("sethostname", hostname);
		if (tmpfs && mount("simcluster-spool", tmpfs, "tmpfs", 0, "mode=0755"))
			die("mount tmpfs", tmpfs);
		if (self_init)
			be_init(prog);
		execvp(prog[0], prog);
		die("exec", prog[0]);
	}

	if (outer_fd >= 0) {
		char buf[32];
		int len = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
		if (write(outer_fd, buf, (size_t)len) != len)
			die("joining cgroup", outer_procs);
		close(outer_fd);
	}
	/* The outer process: passes signals on and ends as its child does. */
	forward_signals();
	int status;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid", NULL);
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		kill(getpid(), WTERMSIG(status));
		return 128 + WTERMSIG(status);
	}
	return WEXITSTATUS(status);
}
