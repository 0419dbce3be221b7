/*
 * libsimcluster-cgroup-chown.so: preloaded into an ordinary user's slurmd (and the slurmstepd
 * it starts) where the nodes have cgroups in the subtree the user's systemd delegates to them
 * (provisioner/providers/local/cgroups.py, "cgroup v2 delegated to an ordinary user").
 *
 * Slurm's cgroup/v2 plugin chowns every cgroup it makes for slurmd, a job or a step to
 * root:root (common_cgroup_instantiate), and fails when that chown fails. The node's slurmd
 * runs as the user in a user namespace that maps only the user, where root has no id: the
 * kernel answers EINVAL. The cgroup already belongs to the user who owns the delegated
 * subtree, as it would belong to root on a host of its own, so such a chown under
 * /sys/fs/cgroup is answered as done. Any other chown is the C library's own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static const char cgroup_root[] = "/sys/fs/cgroup/";

int chown(const char *path, uid_t uid, gid_t gid)
{
	static int (*real_chown)(const char *, uid_t, gid_t);
	int rc;

	if (!real_chown)
		real_chown = (int (*)(const char *, uid_t, gid_t))dlsym(RTLD_NEXT, "chown");
	if (!real_chown) {
		errno = ENOSYS;
		return -1;
	}
	rc = real_chown(path, uid, gid);
	if (rc != 0 && errno == EINVAL && strncmp(path, cgroup_root, sizeof(cgroup_root) - 1) == 0) {
		errno = 0;
		return 0; /* an id this user namespace does not map, on a cgroup the user owns */
	}
	return rc;
}
