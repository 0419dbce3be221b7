/*
 * simcluster_pyxis: pyxis-compatible container options for simcluster's clusters.
 *
 * A SPANK plugin (docs/containers.md). It registers pyxis's option names for srun, sbatch
 * and salloc and runs each task of a step that names --container-image inside a container
 * made from a squashfs image (enroot's format), without enroot:
 *
 *  - once per step and node (slurm_spank_init_post_opt, slurmstepd, as root): the image is
 *    unpacked once per cluster into <state>/images/<key> (unsquashfs, under a lock, shared by
 *    every node of the host), and the step's root file system is an overlay of it with a
 *    writable upper directory of its own, <state>/data/<job>.<step>.<node>; a named
 *    container (--container-name) keeps its upper directory, <state>/data/<job>.name.<name>.<host>,
 *    so later steps of the job on that node see what earlier ones wrote, and a later step
 *    that names it without --container-image runs in it (pyxis's name flags: cb_name);
 *  - per task (slurm_spank_task_init_privileged, as root): a private mount namespace with
 *    /proc, the node's /dev and /sys, /etc/hosts, the --container-mounts and the home
 *    directory mounted in the root file system, pivot_root into it, chdir to the workdir;
 *  - per task after Slurm dropped to the user (slurm_spank_task_init): --container-remap-root
 *    maps the user to uid 0 in a user namespace of its own, as enroot does;
 *  - the step's overlay is unmounted at its end (slurm_spank_exit), its upper directory
 *    removed unless named; named containers go at the end of the job (the cluster's Epilog, epilog.sh.j2).
 *
 * Plugin arguments (plugstack.conf): state_dir=DIR (required: where images and containers live).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(simcluster_pyxis, 1);

#define MAX_MOUNTS 64

/* pyxis's flags of --container-name=NAME[:FLAG] (its args.c), in its order. */
enum name_mode { NAME_AUTO, NAME_CREATE, NAME_EXEC, NAME_NO_EXEC };
static const char *const NAME_FLAGS[] = {"auto", "create", "exec", "no_exec", NULL};

static struct {
    char *image, *mounts, *workdir, *name, *env, *save;
    int remap_root;   /* 1 / 0 */
    int mount_home;   /* 1 / 0 */
    int writable;     /* 1 / 0 */
    enum name_mode name_mode;
} opt = {NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 1, NAME_AUTO};

static char state_dir[PATH_MAX];
static char step_dir[PATH_MAX];   /* <state>/data/<container id> */
static char rootfs[PATH_MAX];     /* step_dir/root: the container's root file system */
static int step_mounted;          /* the step runs in rootfs: the overlay is ours to unmount at its
                                   * end (unnamed), or we hold a user's place in it (named) */
static char task_dir[PATH_MAX];   /* where the task starts inside the container */
static int is_batch;              /* the batch step: its script is mounted in the container */
/* --container-save */
static char save_path[PATH_MAX];  /* where the step's first node saves its container */
/* Why the step's tasks cannot run (a --container-save target, a --container-name that does
 * not fit), said by each task before it fails: slurmstepd's own messages at this point go to
 * slurmd's log, a task's to the user. */
static char step_error[PATH_MAX + 256];
static uint32_t exited_tasks;

static int set_str(char **dst, const char *val)
{
    free(*dst);
    *dst = strdup(val ? val : "");
    return *dst ? 0 : -1;
}

static int cb_image(int v, const char *o, int r) { return set_str(&opt.image, o); }
static int cb_mounts(int v, const char *o, int r) { return set_str(&opt.mounts, o); }
static int cb_workdir(int v, const char *o, int r) { return set_str(&opt.workdir, o); }
/* --container-name=NAME[:FLAG], with pyxis's flags: auto (the default: NAME where it exists,
 * else made from --container-image), create (NAME must not exist yet), exec (NAME must be in
 * use by a running step of the job on the node), no_exec (pyxis: never join a running one's
 * namespaces; here a container has none of its own to join, so the same as auto). */
static int cb_name(int v, const char *o, int r)
{
    const char *colon = o ? strchr(o, ':') : NULL;
    int mode = NAME_AUTO;
    if (colon && colon[1]) {
        for (mode = 0; NAME_FLAGS[mode] && strcmp(NAME_FLAGS[mode], colon + 1); mode++)
            ;
        if (!NAME_FLAGS[mode]) {
            slurm_error("simcluster_pyxis: --container-name=%s: the flag after ':' must be auto, create, exec or "
                        "no_exec", o);
            return -1;
        }
    }
    if (set_str(&opt.name, o))
        return -1;
    if (colon)
        opt.name[colon - o] = 0;
    if (!opt.name[0] || strchr(opt.name, '/') || opt.name[0] == '.') {
        slurm_error("simcluster_pyxis: --container-name=%s: a name must not be empty, hold '/' or start with '.'",
                    o ? o : "");
        return -1;
    }
    opt.name_mode = mode;
    return 0;
}
static int cb_env(int v, const char *o, int r) { return set_str(&opt.env, o); }
static int cb_save(int v, const char *o, int r) { return set_str(&opt.save, o); }
static int cb_flag(int v, const char *o, int r)
{
    switch (v) {
    case 1: opt.remap_root = 1; break;
    case 2: opt.remap_root = 0; break;
    case 3: opt.mount_home = 1; break;
    case 4: opt.mount_home = 0; break;
    case 5: opt.writable = 1; break;
    case 6: opt.writable = 0; break;
    }
    return 0;
}

/* Registered by slurm_spank_init, as pyxis does: with only an exported spank_options table,
 * sbatch answered "unrecognized option" here (Slurm 22.05). */
static struct spank_option options[] = {
    {"container-image", "[docker[d]://]IMAGE|PATH.sqsh",
     "[simcluster] the image: a squashfs file, dockerd://IMAGE of this machine's docker engine, or "
     "docker://[USER@][REGISTRY#]IMAGE[:TAG] pulled by it", 1, 0, cb_image},
    {"container-mounts", "SRC:DST[:ro][,SRC:DST...]", "[simcluster] bind mount[s] inside the container", 1, 0,
     cb_mounts},
    {"container-workdir", "PATH", "[simcluster] working directory inside the container", 1, 0, cb_workdir},
    {"container-name", "NAME[:auto|create|exec|no_exec]",
     "[simcluster] a container that later steps of the job on the node reuse, with its changes, by its name alone "
     "or with --container-image", 1, 0, cb_name},
    {"container-save", "PATH",
     "[simcluster] save the container's file system as a squashfs file at the step's end (on its first node)", 1, 0,
     cb_save},
    {"container-env", "NAME[,NAME...]", "[simcluster] variables whose host value wins over the image's", 1, 0, cb_env},
    {"container-remap-root", NULL, "[simcluster] be uid 0 inside the container", 0, 1, cb_flag},
    {"no-container-remap-root", NULL, "[simcluster] keep your uid inside the container (default)", 0, 2, cb_flag},
    {"container-mount-home", NULL, "[simcluster] bind mount your home directory", 0, 3, cb_flag},
    {"no-container-mount-home", NULL, "[simcluster] do not bind mount your home directory (default)", 0, 4, cb_flag},
    {"container-writable", NULL, "[simcluster] a writable container file system (default)", 0, 5, cb_flag},
    {"container-readonly", NULL, "[simcluster] a read-only container file system", 0, 6, cb_flag},
    SPANK_OPTIONS_TABLE_END};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    for (struct spank_option *o = options; o->name; o++)
        if (spank_option_register(sp, o) != ESPANK_SUCCESS)
            return -1;
    return 0;
}

static int parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++)
        if (strncmp(av[i], "state_dir=", 10) == 0)
            snprintf(state_dir, sizeof(state_dir), "%s", av[i] + 10);
    /* Paths below it are built in PATH_MAX buffers: a short state_dir leaves room for them. */
    if (!state_dir[0] || strlen(state_dir) > 1024) {
        slurm_error("simcluster_pyxis: plugstack.conf gives no state_dir=DIR (of at most 1024 characters)");
        return -1;
    }
    return 0;
}

/* mkdir -p */
static int mkdirs(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, mode) && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, mode) && errno != EEXIST)
        return -1;
    return 0;
}

static int run(char *const argv[])
{
    pid_t pid = fork();
    int status;
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) && errno != ENOENT ? -1 : 0;
}

/* rm -rf that never crosses into a mount (a leftover bind stays untouched). */
static int remove_tree(const char *path)
{
    if (access(path, F_OK))
        return 0;
    return nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

#define DOCKERD "dockerd://"
#define DOCKER "docker://"

/* A squashfs file that exists, or dockerd://IMAGE; other URIs get the command to use. */
static int check_image(const char *image)
{
    struct stat st;
    if (strncmp(image, DOCKERD, strlen(DOCKERD)) == 0 && image[strlen(DOCKERD)])
        return 0;
    if (strncmp(image, DOCKER, strlen(DOCKER)) == 0 && image[strlen(DOCKER)])
        return 0;
    if (strstr(image, "://")) {
        slurm_error("simcluster_pyxis: --container-image=%s: only squashfs files, dockerd://IMAGE (an image of "
                    "this machine's docker engine) and docker://IMAGE are supported", image);
        return -1;
    }
    if (stat(image, &st) || !S_ISREG(st.st_mode)) {
        slurm_error("simcluster_pyxis: --container-image=%s: no such squashfs file", image);
        return -1;
    }
    return 0;
}

/* The first line a command prints (its other output is dropped); -1 where it fails. */
static int run_line(char *const argv[], char *buf, size_t len)
{
    int fds[2], status;
    if (pipe(fds))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(fds[1], 1);
        if (null >= 0)
            dup2(null, 2);
        close(fds[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *fh = fdopen(fds[0], "r");
    buf[0] = 0;
    if (fh) {
        if (!fgets(buf, len, fh))
            buf[0] = 0;
        while (fgetc(fh) != EOF)
            ;
        fclose(fh);
    }
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        return -1;
    buf[strcspn(buf, "\n")] = 0;
    return buf[0] ? 0 : -1;
}

/* dockerd://IMAGE unpacked as `simcluster image import` does: the file system of a
 * container made from it (never started) and its ENV in /etc/environment. */
static const char DOCKER_EXPORT[] =
    "set -e; cid=$(docker create \"$1\" /bin/true); trap 'docker rm -f \"$cid\" >/dev/null' EXIT; "
    "docker export \"$cid\" | tar -x -C \"$2\" --numeric-owner; mkdir -p \"$2/etc\"; "
    "docker image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' \"$1\" | grep = > \"$2/etc/.env\" "
    "&& mv \"$2/etc/.env\" \"$2/etc/environment\" || rm -f \"$2/etc/.env\"";

/* Where the nodes have no docker engine (a docker cluster's containers), the host's
 * `simcluster exec` and `simcluster env` wrappers unpack a dockerd:// image before srun,
 * sbatch or salloc runs, and leave its id in <state>/images/dockerd-names/<name, with every
 * byte but [A-Za-z0-9._-] as %XX> (providers/docker/images.py). */
static int dockerd_ref(const char *name, char *id, size_t len)
{
    char path[PATH_MAX], *p;
    int n = snprintf(path, sizeof(path), "%s/images/dockerd-names/", state_dir);
    for (p = path + n; *name && p < path + sizeof(path) - 4; name++) {
        unsigned char c = (unsigned char)*name;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._-", c))
            *p++ = c;
        else
            p += sprintf(p, "%%%02X", c);
    }
    *p = 0;
    FILE *fh = fopen(path, "r");
    if (!fh)
        return -1;
    int rc = fgets(id, len, fh) ? 0 : -1;
    fclose(fh);
    id[strcspn(id, "\n")] = 0;
    return rc;
}

/* enroot's docker://[USER@][REGISTRY#]IMAGE[:TAG] as docker's reference, REGISTRY/IMAGE[:TAG]
 * (USER is for enroot's credentials: docker uses its own login). */
static void docker_ref(const char *uri, char *ref, size_t len)
{
    const char *rest = uri + strlen(DOCKER), *hash = strchr(rest, '#'), *at = strchr(rest, '@');
    if (at && (hash ? at < hash : strncmp(at + 1, "sha256:", 7) != 0))
        rest = at + 1;
    hash = strchr(rest, '#');
    if (hash)
        snprintf(ref, len, "%.*s/%s", (int)(hash - rest), rest, hash + 1);
    else
        snprintf(ref, len, "%s", rest);
}

/* docker://...: pulled by this machine's docker engine, then used as dockerd://REF. Where
 * the pull fails (no registry reachable, no such image), one line with docker's reason. */
static int pull_image(const char *image, char *dockerd, size_t len)
{
    char ref[PATH_MAX - 16], why[512];
    docker_ref(image, ref, sizeof(ref));
    char *argv[] = {"sh", "-c", "out=$(docker pull -q \"$1\" 2>&1) && exit 0; printf '%s\\n' \"$out\" | tail -n 1; "
                    "exit 1", "sh", ref, NULL};
    snprintf(dockerd, len, "%s%s", DOCKERD, ref);
    int rc = run_line(argv, why, sizeof(why));
    why[strcspn(why, "\n")] = 0;
    if (rc == 0 || why[0] == 0)
        return 0;  /* pulled (docker pull -q prints the reference), or an old docker that prints nothing */
    slurm_error("simcluster_pyxis: --container-image=%s: docker pull %s failed (%s); where no registry is "
                "reachable, docker load the image and use dockerd://IMAGE, or a squashfs file", image, ref, why);
    return -1;
}

/* The unpacked image, made once per cluster: <state>/images/<size>-<mtime>-<inode> for a
 * squashfs file, <state>/images/dockerd-<image id> for a docker image. */
static int unpack_image(const char *image, char *out, size_t outlen)
{
    char pulled[PATH_MAX];
    if (strncmp(image, DOCKER, strlen(DOCKER)) == 0)
        return pull_image(image, pulled, sizeof(pulled)) ? -1 : unpack_image(pulled, out, outlen);
    struct stat st;
    char dir[PATH_MAX], tmp[PATH_MAX], lock[PATH_MAX], id[256];
    int docker = strncmp(image, DOCKERD, strlen(DOCKERD)) == 0;
    const char *name = image + strlen(DOCKERD);
    if (check_image(image))
        return -1;
    if (docker) {
        char *argv[] = {"docker", "image", "inspect", "-f", "{{.Id}}", (char *)name, NULL};
        if ((run_line(argv, id, sizeof(id)) && dockerd_ref(name, id, sizeof(id))) || strncmp(id, "sha256:", 7) ||
            strlen(id) < 7 + 16) {
            slurm_error("simcluster_pyxis: --container-image=%s: this machine's docker engine has no image %s "
                        "(docker images lists them; docker pull or simcluster image build makes them; on a docker "
                        "cluster, run srun, sbatch or salloc with it once from the host: simcluster env, "
                        "simcluster exec)", image, name);
            return -1;
        }
    } else if (stat(image, &st)) {
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/images", state_dir);
    if (mkdirs(dir, 0755))
        return -1;
    if (docker)
        snprintf(out, outlen, "%s/images/dockerd-%.16s", state_dir, id + 7);
    else
        snprintf(out, outlen, "%s/images/%llx-%llx-%llx", state_dir, (unsigned long long)st.st_size,
                 (unsigned long long)st.st_mtime, (unsigned long long)st.st_ino);
    snprintf(lock, sizeof(lock), "%s.lock", out);
    int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX)) {
        slurm_error("simcluster_pyxis: cannot lock %s: %m", lock);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = 0;
    if (access(out, F_OK)) {  /* not unpacked yet: another node may have done it meanwhile */
        snprintf(tmp, sizeof(tmp), "%s.tmp", out);
        remove_tree(tmp);
        char *unsquash[] = {"unsquashfs", "-no-progress", "-quiet", "-d", tmp, (char *)image, NULL};
        char *export[] = {"sh", "-c", (char *)DOCKER_EXPORT, "sh", (char *)name, tmp, NULL};
        if ((docker && mkdirs(tmp, 0755)) || run(docker ? export : unsquash) != 0 || rename(tmp, out)) {
            slurm_error("simcluster_pyxis: %s %s failed", docker ? "docker export of" : "unsquashfs of", image);
            remove_tree(tmp);
            rc = -1;
        }
    }
    close(fd);
    return rc;
}

static int get_u32(spank_t sp, spank_item_t item, uint32_t *v)
{
    return spank_get_item(sp, item, v) == ESPANK_SUCCESS ? 0 : -1;
}

/* <step_dir>/tmp: 1 where it is a tmpfs of ours (``make``: mounted now where it was not), 0
 * where not, -1 where it cannot be. */
static int tmpfs_layer(int make)
{
    char dir[PATH_MAX];
    struct stat st, parent;
    snprintf(dir, sizeof(dir), "%s/tmp", step_dir);
    if (stat(dir, &st) == 0 && stat(step_dir, &parent) == 0 && st.st_dev != parent.st_dev)
        return 1;
    if (!make)
        return 0;
    if (mkdirs(dir, 0755) || mount("tmpfs", dir, "tmpfs", MS_NOSUID, "mode=0755")) {
        slurm_error("simcluster_pyxis: tmpfs for the container's layer at %s: %m", dir);
        return -1;
    }
    return 1;
}

/* The overlay's upper and work directories, on disk or in the tmpfs; work made afresh:
 * overlayfs's scratch space, which a volatile mount refuses used. */
static int layer_dirs(int on_tmpfs, char *upper, char *work)
{
    const char *in = on_tmpfs ? "/tmp" : "";
    snprintf(upper, PATH_MAX, "%s%s/upper", step_dir, in);
    snprintf(work, PATH_MAX, "%s%s/work", step_dir, in);
    remove_tree(work);
    return mkdirs(upper, 0755) || mkdirs(work, 0755) ? -1 : 0;
}

/* Unmount a container's overlay and layer tmpfs (if any) in <dir>, then remove it. */
static void remove_container(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/root", dir);
    umount2(path, MNT_DETACH);
    snprintf(path, sizeof(path), "%s/tmp", dir);
    umount2(path, MNT_DETACH);
    remove_tree(dir);
}

/* 1 where this srun, sbatch or salloc took --NAME=value from the job's environment, where
 * Slurm passes a job's SPANK options on to its steps (SLURM_SPANK__SLURM_SPANK_OPTION_
 * <plugin>_<option with '_' for '-'>), not from its own command line. */
static int inherited_option(const char *name, const char *value)
{
    char var[128];
    snprintf(var, sizeof(var), "SLURM_SPANK__SLURM_SPANK_OPTION_simcluster_pyxis_%s", name);
    const char *v = getenv(var);
    return getenv("SLURM_JOB_ID") && v && value && strcmp(v, value) == 0;
}

static int save_target(spank_t sp);

/* The overlay of image_dir at rootfs, with the upper layer in step_dir (kept where a named
 * container had it before: on disk, or on its tmpfs). */
static int mount_container(const char *image_dir)
{
    char upper[PATH_MAX], work[PATH_MAX], data[PATH_MAX + 16 * 3];
    /* A named container whose layer is on a tmpfs (below) keeps using it. */
    if (layer_dirs(tmpfs_layer(0) > 0, upper, work) || mkdirs(rootfs, 0755)) {
        slurm_error("simcluster_pyxis: cannot make %s: %m", step_dir);
        return -1;
    }
    /* volatile (Linux 5.10+): no sync of the upper file system at unmount, which at the
     * step's end could take as long as writing back everything on that disk (a freshly
     * unpacked image), while the next srun of the job waits for the step's resources.
     * A container lives no longer than its job, so nothing needs to survive a crash. */
    snprintf(data, sizeof(data), "lowerdir=%s,upperdir=%s,workdir=%s,volatile", image_dir, upper, work);
    int rc = mount("overlay", rootfs, "overlay", 0, data);
    if (rc && errno == EINVAL) {  /* an older kernel: without volatile */
        *strrchr(data, ',') = 0;
        rc = mount("overlay", rootfs, "overlay", 0, data);
    }
    /* The state directory on a file system overlayfs refuses as upper (overlayfs itself, as
     * where simcluster runs in a container, or some network file systems): the layer on a
     * tmpfs of the step's (or named container's) own, gone at its end. */
    if (rc && errno == EINVAL && tmpfs_layer(1) > 0 && layer_dirs(1, upper, work) == 0) {
        snprintf(data, sizeof(data), "lowerdir=%s,upperdir=%s,workdir=%s", image_dir, upper, work);
        rc = mount("overlay", rootfs, "overlay", 0, data);
    }
    if (rc) {
        slurm_error("simcluster_pyxis: overlay mount of %s failed: %m (the state directory must be on a "
                    "file system overlayfs accepts as upper, e.g. ext4 or xfs)", rootfs);
        return -1;
    }
    return 0;
}

/* 1 where path is a mount point (another file system than its parent directory's). */
static int is_mount_point(const char *path, const char *parent)
{
    struct stat st, up;
    return stat(path, &st) == 0 && stat(parent, &up) == 0 && st.st_dev != up.st_dev;
}

/* The node's own name for a named container's directory: its host name (every node of a
 * local cluster has a UTS namespace of its own, as every node container of a docker cluster
 * has), not S_JOB_NODEID, which is the node's place in the step: node2 is 0 in a step on node2
 * alone, and all the nodes of a host share the state directory. */
static void node_name(spank_t sp, char *out, size_t len)
{
    uint32_t node = 0;
    if (gethostname(out, len) == 0 && out[0] && !strchr(out, '/'))
        return;
    get_u32(sp, S_JOB_NODEID, &node);
    snprintf(out, len, "node-%u", node);
}

/* step_dir/users/step.<id>: a step of the job that runs in the named container now; the
 * last one to leave unmounts it (slurm_spank_exit). A step killed before it leaves keeps it
 * mounted until the job's end (the Epilog). */
static void user_path(uint32_t step, char *out, size_t len)
{
    snprintf(out, len, "%s/users/step.%u", step_dir, step);
}

/* The named container of this job on this node, with pyxis's rules: where it exists, the
 * step runs in it with its changes (the image it was made from; a --container-image given
 * now is not imported, as with pyxis); while another step of the job runs in it, in the very
 * same mount; where it does not, --container-image makes it, and without one the step fails.
 * The flags of --container-name (cb_name) refuse the other cases. Under a lock of the
 * container: two steps that name it at once make it once. */
static int named_container(spank_t sp, uint32_t step)
{
    char path[PATH_MAX + 32], image_dir[PATH_MAX] = "";
    int has_image = opt.image && opt.image[0], rc = 0, refused = 1;
    snprintf(path, sizeof(path), "%s/users", step_dir);
    if (mkdirs(path, 0755)) {
        slurm_error("simcluster_pyxis: cannot make %s: %m", path);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/lock", step_dir);
    int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX)) {
        slurm_error("simcluster_pyxis: cannot lock %s: %m", path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/image", step_dir);
    FILE *fh = fopen(path, "r");
    int exists = fh && fgets(image_dir, sizeof(image_dir), fh);
    if (fh)
        fclose(fh);
    image_dir[strcspn(image_dir, "\n")] = 0;
    int running = exists && is_mount_point(rootfs, step_dir);
    if (exists && opt.name_mode == NAME_CREATE) {
        snprintf(step_error, sizeof(step_error), "--container-name=%s:create: a container named %s exists "
                 "already in this job on this node", opt.name, opt.name);
    } else if (!running && opt.name_mode == NAME_EXEC) {
        snprintf(step_error, sizeof(step_error), "--container-name=%s:exec: no step of this job runs in a "
                 "container named %s on this node now", opt.name, opt.name);
    } else if (!exists && !has_image) {
        snprintf(step_error, sizeof(step_error), "--container-name=%s: no container named %s in this job on "
                 "this node (a step with --container-image=IMAGE --container-name=%s makes it), and no "
                 "--container-image", opt.name, opt.name, opt.name);
    } else if (running) {
        refused = 0;  /* shared with the steps in it now; the last to leave unmounts it */
    } else if (exists) {
        /* Not mounted: no step runs in it, whatever a killed one left in users/. */
        snprintf(path, sizeof(path), "%s/users", step_dir);
        remove_tree(path);
        rc = mkdirs(path, 0755) || mount_container(image_dir) ? -1 : 0;
        refused = 0;
    } else if ((rc = unpack_image(opt.image, image_dir, sizeof(image_dir))) == 0 &&
               (rc = mount_container(image_dir)) == 0) {
        /* Made: its image, for the steps that name it later without one. */
        char tmp[PATH_MAX + 32];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        fh = fopen(tmp, "w");
        rc = fh && fprintf(fh, "%s\n", image_dir) > 0 && fclose(fh) == 0 && rename(tmp, path) == 0 ? 0 : -1;
        if (rc) {
            slurm_error("simcluster_pyxis: cannot write %s: %m", path);
            umount2(rootfs, MNT_DETACH);
        }
        refused = 0;
    }
    if (rc == 0 && !refused) {
        user_path(step, path, sizeof(path));
        int user = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (user >= 0)
            close(user);
        step_mounted = 1;
    }
    close(fd);
    return rc;
}

/* The step leaves its named container; the last step in it unmounts it (its layer stays
 * until the job's end). */
static void leave_named_container(spank_t sp)
{
    char path[PATH_MAX + 32];
    uint32_t step;
    snprintf(path, sizeof(path), "%s/lock", step_dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX) || get_u32(sp, S_JOB_STEPID, &step)) {
        slurm_error("simcluster_pyxis: cannot lock %s: %m", path);
        if (fd >= 0)
            close(fd);
        return;
    }
    user_path(step, path, sizeof(path));
    unlink(path);
    snprintf(path, sizeof(path), "%s/users", step_dir);
    DIR *dir = opendir(path);
    int others = 0;
    for (struct dirent *e; dir && (e = readdir(dir));)
        others |= e->d_name[0] != '.';
    if (dir)
        closedir(dir);
    if (!others && umount2(rootfs, MNT_DETACH))
        slurm_error("simcluster_pyxis: unmount %s: %m", rootfs);
    close(fd);
}

/* Once per step and node, in slurmstepd as root: the container's root file system. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    char image_dir[PATH_MAX], host[256];
    uint32_t job, step, node;
    int has_image = opt.image && opt.image[0], named = opt.name && opt.name[0];
    if (!has_image && !named)
        return 0;
    if (parse_args(ac, av))
        return -1;
    if (!spank_remote(sp)) {
        /* A name alone: whether the container exists is known on each node only. */
        if (!has_image)
            return 0;
        /* srun, sbatch, salloc: a wrong image is the user's one line before anything starts;
         * srun also unpacks it here, on the nodes' host (the cache is the cluster's) where
         * its user may write there, so that the step itself only mounts. */
        if (spank_context() == S_CTX_LOCAL && access(state_dir, W_OK) == 0)
            return unpack_image(opt.image, image_dir, sizeof(image_dir));
        /* An srun in a container'd batch script (or in one of its steps) takes the job's
         * options from its environment; they were checked when the job was submitted, and
         * the image's path on the node is out of sight inside the container. */
        if (inherited_option("container_image", opt.image))
            return 0;
        if (strncmp(opt.image, DOCKER, strlen(DOCKER)) == 0) {  /* sbatch, salloc: no registry is one line now */
            char pulled[PATH_MAX];
            return pull_image(opt.image, pulled, sizeof(pulled));
        }
        return check_image(opt.image);
    }
    if (get_u32(sp, S_JOB_ID, &job) || get_u32(sp, S_JOB_STEPID, &step) || get_u32(sp, S_JOB_NODEID, &node))
        return -1;
    /* As pyxis (0.12+): sbatch's options put the batch script itself in the container;
     * salloc's reach every srun of the allocation (Slurm passes SPANK options in the job's
     * environment). The extern step and an interactive step stay on the node. */
    if (step == SLURM_EXTERN_CONT || step == SLURM_INTERACTIVE_STEP)
        return 0;
    is_batch = step == SLURM_BATCH_SCRIPT;
    if (opt.save && opt.save[0] && node == 0)
        save_target(sp);  /* a wrong PATH fails the tasks, where the user sees why */
    if (named) {
        node_name(sp, host, sizeof(host));
        snprintf(step_dir, sizeof(step_dir), "%s/data/%u.name.%s.%s", state_dir, job, opt.name, host);
        snprintf(rootfs, sizeof(rootfs), "%s/root", step_dir);
        return named_container(sp, step);
    }
    snprintf(step_dir, sizeof(step_dir), "%s/data/%u.%u.%u", state_dir, job, step, node);
    snprintf(rootfs, sizeof(rootfs), "%s/root", step_dir);
    if (unpack_image(opt.image, image_dir, sizeof(image_dir)) || mount_container(image_dir))
        return -1;
    step_mounted = 1;
    return 0;
}

static int bind_into(const char *src, const char *dst_in_root, int flags)
{
    char dst[PATH_MAX];
    struct stat st;
    snprintf(dst, sizeof(dst), "%s%s", rootfs, dst_in_root);
    if (stat(src, &st)) {
        slurm_error("simcluster_pyxis: mount source %s does not exist on this node", src);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        if (mkdirs(dst, 0755)) {
            slurm_error("simcluster_pyxis: cannot make %s in the container: %m", dst_in_root);
            return -1;
        }
    } else if (access(dst, F_OK)) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", dst);
        *strrchr(parent, '/') = 0;
        int fd = (mkdirs(parent, 0755) == 0) ? open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644) : -1;
        if (fd < 0) {
            slurm_error("simcluster_pyxis: cannot make %s in the container: %m", dst_in_root);
            return -1;
        }
        close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL)) {
        slurm_error("simcluster_pyxis: bind mount %s on %s failed: %m", src, dst_in_root);
        return -1;
    }
    if ((flags & MS_RDONLY) && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
        slurm_error("simcluster_pyxis: read-only remount of %s failed: %m", dst_in_root);
        return -1;
    }
    return 0;
}

/* --container-mounts=SRC:DST[:FLAGS],... (FLAGS: ro, rw, and pyxis's '+'-joined others, ignored). */
static int user_mounts(const char *spec)
{
    char *copy = strdup(spec), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) {
        char *src = item, *dst = strchr(item, ':'), *flags = NULL;
        if (dst) {
            *dst++ = 0;
            flags = strchr(dst, ':');
            if (flags)
                *flags++ = 0;
        } else {
            dst = src;  /* SRC alone: the same path inside */
        }
        if (src[0] != '/' || dst[0] != '/') {
            slurm_error("simcluster_pyxis: --container-mounts: '%s' needs absolute paths SRC:DST[:ro]", item);
            rc = -1;
            break;
        }
        int ro = 0;
        if (flags) {
            char *fsave = NULL;
            for (char *f = strtok_r(flags, "+", &fsave); f; f = strtok_r(NULL, "+", &fsave))
                ro |= strcmp(f, "ro") == 0;
        }
        rc = bind_into(src, dst, ro ? MS_RDONLY : 0);
    }
    free(copy);
    return rc;
}

/* The image's /etc/environment (written by simcluster image import from the image's ENV,
 * as enroot does) overrides the task's variables except those --container-env names. */
static void image_environment(spank_t sp)
{
    char path[PATH_MAX], line[8192];
    snprintf(path, sizeof(path), "%s/etc/environment", rootfs);
    FILE *fh = fopen(path, "r");
    if (!fh)
        return;
    while (fgets(line, sizeof(line), fh)) {
        line[strcspn(line, "\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#' || eq == line)
            continue;
        *eq = 0;
        char *val = eq + 1;
        size_t n = strlen(val);
        if (n >= 2 && val[0] == '"' && val[n - 1] == '"') {
            val[n - 1] = 0;
            val++;
        }
        int keep = 0;
        if (opt.env) {
            char *copy = strdup(opt.env), *save = NULL;
            for (char *v = strtok_r(copy, ",", &save); v; v = strtok_r(NULL, ",", &save))
                if (strcmp(v, line) == 0)
                    keep = 1;
            free(copy);
        }
        if (!keep)
            spank_setenv(sp, line, val, 1);
    }
    fclose(fh);
}

/* -- Slurm's clients inside the container ------------------------------------------------- */

#define MAX_NODE_BINDS 16

/* KEY=VALUE of slurm.conf (the key in any case, the first line that has it); "" if none. */
static void conf_value(const char *conf, const char *key, char *out, size_t len)
{
    char line[4096];
    size_t n = strlen(key);
    FILE *fh = fopen(conf, "r");
    out[0] = 0;
    if (!fh)
        return;
    while (fgets(line, sizeof(line), fh)) {
        char *p = line + strspn(line, " \t");
        if (strncasecmp(p, key, n) == 0 && p[n] == '=') {
            p += n + 1;
            p[strcspn(p, " \t\r\n#")] = 0;
            snprintf(out, len, "%s", p);
            break;
        }
    }
    fclose(fh);
}

/* Add PATH (its directory where dir_of) to the list unless it or a directory above it is
 * there already, or it does not exist on the node. */
static void add_bind(char list[][PATH_MAX], int *n, const char *path, int dir_of)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    if (dir_of) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            return;
        *slash = 0;
    }
    if (p[0] != '/' || access(p, F_OK) || *n >= MAX_NODE_BINDS)
        return;
    for (int i = 0; i < *n; i++) {
        size_t len = strlen(list[i]);
        if (strncmp(p, list[i], len) == 0 && (p[len] == 0 || p[len] == '/'))
            return;
    }
    snprintf(list[(*n)++], PATH_MAX, "%s", p);
}

/* The node's Slurm configuration and munge's socket at the same paths inside, as pyxis sites
 * do with enroot hooks, so that an image with Slurm's client (srun, scontrol, sbatch of the
 * same release) can use them: the launcher scripts of training jobs start steps and read the
 * job's node list from inside the container. What is bound: /etc/slurm (where local nodes
 * see their cluster's configuration), the directory of SLURM_CONF, of the TaskProlog,
 * TaskEpilog and plugstack.conf that slurm.conf names (Slurm runs the TaskProlog inside the
 * container), this plugin (plugstack.conf loads it in every srun), all read-only, and the
 * directory of munge's socket (AuthInfo=socket=, else munge's default). */
static int node_binds(spank_t sp)
{
    char list[MAX_NODE_BINDS][PATH_MAX], conf[PATH_MAX] = "", value[PATH_MAX];
    int n = 0, ro[MAX_NODE_BINDS];
    struct stat st;
    Dl_info self;
    if (stat("/etc/slurm", &st) == 0 && S_ISDIR(st.st_mode))
        add_bind(list, &n, "/etc/slurm", 0);
    if (spank_getenv(sp, "SLURM_CONF", conf, sizeof(conf)) != ESPANK_SUCCESS)
        snprintf(conf, sizeof(conf), "%s", getenv("SLURM_CONF") ? getenv("SLURM_CONF") : "/etc/slurm/slurm.conf");
    add_bind(list, &n, conf, 1);
    const char *files[] = {"TaskProlog", "TaskEpilog", "PlugStackConfig"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        conf_value(conf, files[i], value, sizeof(value));
        add_bind(list, &n, value, 1);
    }
    if (dladdr((void *)node_binds, &self) && self.dli_fname && self.dli_fname[0] == '/')
        add_bind(list, &n, self.dli_fname, 0);
    int first_rw = n;
    conf_value(conf, "AuthInfo", value, sizeof(value));
    char *sock = strstr(value, "socket=");
    if (sock) {
        sock += strlen("socket=");
        sock[strcspn(sock, ",")] = 0;
    }
    add_bind(list, &n, sock && sock[0] ? sock : "/run/munge/munge.socket.2", 1);
    for (int i = 0; i < n; i++)
        ro[i] = i < first_rw;
    for (int i = 0; i < n; i++)
        if (bind_into(list[i], list[i], ro[i] ? MS_RDONLY : 0))
            return -1;
    return 0;
}

/* -- real GPUs: the host's NVIDIA driver inside ------------------------------------------- */

/* What enroot's nvidia hook (libnvidia-container's "utility" and "compute" capabilities)
 * puts in a container: the driver's user-space libraries, which must match the kernel's
 * module and so come from the host, never from the image, and its tools. */
static const char *const NVIDIA_LIBS[] = {
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-opencl.so", "libnvidia-allocator.so", "libnvidia-gpucomp.so",
    "libnvidia-pkcs11.so", "libnvidia-fatbinaryloader.so", "libnvidia-compiler.so", NULL};
static const char *const NVIDIA_BINS[] = {
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", NULL};

/* A program in PATH or the usual directories (slurmstepd's PATH may be short); 0 if found. */
static int find_program(const char *name, char *out, size_t len)
{
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             getenv("PATH") ? getenv("PATH") : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (d[0] == '/' && access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* The driver's libraries ldconfig knows (the machine's word size only), each bound read-only
 * at its own path, and the container's loader told about their directories. */
static int nvidia_from_ldconfig(void)
{
    char line[PATH_MAX + 256], dirs[8][PATH_MAX], ldconfig[PATH_MAX], conf[PATH_MAX];
    int ndirs = 0;
    if (find_program("ldconfig", ldconfig, sizeof(ldconfig)))
        return -1;
    char cmd[PATH_MAX + 8];
    snprintf(cmd, sizeof(cmd), "%s -p", ldconfig);
    FILE *fh = popen(cmd, "r");
    if (!fh)
        return -1;
    while (fgets(line, sizeof(line), fh)) {
        char *name = line + strspn(line, " \t"), *arch = strchr(line, '('), *path = strstr(line, "=> ");
        if (!arch || !path || !strchr(arch, ','))  /* "(libc6)": 32-bit libraries of a 64-bit machine */
            continue;
        path += 3;
        path[strcspn(path, "\n")] = 0;
        int wanted = 0;
        for (int i = 0; NVIDIA_LIBS[i]; i++)
            wanted |= strncmp(name, NVIDIA_LIBS[i], strlen(NVIDIA_LIBS[i])) == 0;
        if (!wanted || path[0] != '/' || bind_into(path, path, MS_RDONLY))
            continue;
        *strrchr(path, '/') = 0;
        int known = 0;
        for (int i = 0; i < ndirs; i++)
            known |= strcmp(dirs[i], path) == 0;
        if (!known && ndirs < 8)
            snprintf(dirs[ndirs++], PATH_MAX, "%s", path);
    }
    pclose(fh);
    snprintf(conf, sizeof(conf), "%s/etc/ld.so.conf.d", rootfs);
    if (ndirs && opt.writable && mkdirs(conf, 0755) == 0) {
        snprintf(conf, sizeof(conf), "%s/etc/ld.so.conf.d/000-simcluster-nvidia.conf", rootfs);
        FILE *out = fopen(conf, "w");
        for (int i = 0; out && i < ndirs; i++)
            fprintf(out, "%s\n", dirs[i]);
        if (out)
            fclose(out);
        char *argv[] = {ldconfig, "-r", rootfs, NULL};
        (void)run(argv);  /* the image's loader cache with them; a loader without one still searches */
    }
    for (int i = 0; NVIDIA_BINS[i]; i++)
        if (find_program(NVIDIA_BINS[i], line, sizeof(line)) == 0)
            (void)bind_into(line, line, MS_RDONLY);
    return 0;
}

/* On a node with NVIDIA GPUs (/dev/nvidiactl): `nvidia-container-cli configure` where
 * installed, as enroot's hook does, else the libraries that ldconfig lists and the tools.
 * The device files come with the node's /dev; the node's device cgroup lets the task open
 * only its step's GPUs, and CUDA_VISIBLE_DEVICES (the TaskProlog) names them. */
static int gpu_binds(void)
{
    struct stat st;
    char cli[PATH_MAX], pid[32];
    if (stat("/dev/nvidiactl", &st) || !S_ISCHR(st.st_mode))
        return 0;  /* no GPU, or fake ones: their files are the node's, nvidia-smi the TaskProlog's */
    if (find_program("nvidia-container-cli", cli, sizeof(cli)) == 0) {
        snprintf(pid, sizeof(pid), "--pid=%d", (int)getpid());
        char *argv[] = {cli, "--load-kmods", "configure", "--no-cgroups", "--no-devbind", "--device=all",
                        "--compute", "--utility", pid, rootfs, NULL};
        if (run(argv) == 0)
            return 0;
        slurm_error("simcluster_pyxis: nvidia-container-cli configure failed; the driver's libraries from "
                    "ldconfig -p instead");
    }
    if (nvidia_from_ldconfig()) {
        slurm_error("simcluster_pyxis: no ldconfig on this node: the container has no NVIDIA driver libraries");
        return -1;
    }
    return 0;
}

/* Per task, as root, before Slurm drops to the user: into the container. */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    char cwd[PATH_MAX] = "/", path[PATH_MAX];
    uid_t uid;
    /* Before anything else: a step that names no container it can run in never runs its
     * tasks outside one. */
    if (step_error[0]) {
        slurm_error("simcluster_pyxis: %s", step_error);
        return -1;
    }
    if (!step_mounted)
        return 0;
    if (!getcwd(cwd, sizeof(cwd)))
        snprintf(cwd, sizeof(cwd), "/");
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
        slurm_error("simcluster_pyxis: private mount namespace: %m");
        return -1;
    }
    /* The root must be a mount point of this namespace for pivot_root and the read-only remount. */
    if (mount(rootfs, rootfs, NULL, MS_BIND, NULL)) {
        slurm_error("simcluster_pyxis: bind %s: %m", rootfs);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/proc", rootfs);
    mkdirs(path, 0555);
    if (mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) {
        slurm_error("simcluster_pyxis: mount /proc: %m");
        return -1;
    }
    /* The node's /dev (fake GPU device files, /dev/nvidia* on a real GPU machine) and /sys. */
    if (bind_into("/dev", "/dev", 0) || bind_into("/sys", "/sys", 0))
        return -1;
    if (access("/etc/hosts", F_OK) == 0 && bind_into("/etc/hosts", "/etc/hosts", 0))
        return -1;  /* the node's names, so srun and MPI inside resolve the cluster's nodes */
    if (node_binds(sp) || gpu_binds())
        return -1;
    if (is_batch) {  /* the script, in slurmd's spool directory, at the same path inside */
        int argc = 0;
        char **argv = NULL;
        if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 ||
            argv[0][0] != '/' || bind_into(argv[0], argv[0], MS_RDONLY))
            return -1;
    }
    if (opt.mounts && opt.mounts[0] && user_mounts(opt.mounts))
        return -1;
    if (opt.mount_home && spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS) {
        struct passwd *pw = getpwuid(uid);
        if (pw && pw->pw_dir && pw->pw_dir[0] == '/' && bind_into(pw->pw_dir, pw->pw_dir, 0))
            return -1;
    }
    if (!opt.writable && mount(NULL, rootfs, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL)) {
        slurm_error("simcluster_pyxis: read-only remount of the container: %m");
        return -1;
    }
    image_environment(sp);
    /* pivot_root, else (EPERM: docker's default seccomp profile refuses it even with
     * CAP_SYS_ADMIN) the root moved over / and chroot, as runc's no_pivot does. */
    if (chdir(rootfs) ||
        (syscall(SYS_pivot_root, ".", ".")
             ? errno != EPERM || mount(".", "/", NULL, MS_MOVE, NULL) || chroot(".")
             : umount2(".", MNT_DETACH)) ||
        chdir("/")) {
        slurm_error("simcluster_pyxis: pivot_root into %s: %m", rootfs);
        return -1;
    }
    /* Slurm changes to the job's directory after this hook, and complains where it is
     * missing: the task starts in --container-workdir, else in the job's directory where
     * the image has it, else in / (slurm_spank_task_init). */
    if (opt.workdir && opt.workdir[0]) {
        snprintf(task_dir, sizeof(task_dir), "%s", opt.workdir);
        if (access(task_dir, F_OK) && mkdirs(task_dir, 0755)) {
            slurm_error("simcluster_pyxis: --container-workdir=%s: cannot make it in the container: %m", task_dir);
            return -1;
        }
    } else {
        snprintf(task_dir, sizeof(task_dir), "%s", access(cwd, F_OK) == 0 ? cwd : "/");
    }
    /* An empty stand-in for the job's directory (in this container's own upper layer)
     * spares the task Slurm's "couldn't chdir" message; the task still starts in task_dir. */
    if (access(cwd, F_OK) && opt.writable)
        (void)mkdirs(cwd, 0755);
    return 0;
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Per task, as the user: --container-remap-root maps the user to 0 in a user namespace. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (!step_mounted)
        return 0;
    if (chdir(task_dir)) {
        slurm_error("simcluster_pyxis: cannot change to %s inside the container: %m", task_dir);
        return -1;
    }
    if (!opt.remap_root || uid == 0)
        return 0;
    /* Slurm's switch to the user left the task non-dumpable, which makes /proc/self/uid_map
     * root's: dumpable again, the task may map itself, as any unprivileged process may. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (unshare(CLONE_NEWUSER)) {
        slurm_error("simcluster_pyxis: --container-remap-root: user namespace: %m");
        return -1;
    }
    snprintf(map, sizeof(map), "0 %u 1\n", uid);
    if (write_file("/proc/self/uid_map", map) || write_file("/proc/self/setgroups", "deny") ||
        (snprintf(map, sizeof(map), "0 %u 1\n", gid), write_file("/proc/self/gid_map", map))) {
        slurm_error("simcluster_pyxis: --container-remap-root: uid/gid map: %m");
        return -1;
    }
    return 0;
}

/* -- --container-save ------------------------------------------------------------------- */


/* --container-save=PATH as an absolute path (a relative one is the job's directory's, as
 * with pyxis), checked now: its directory must exist and be the job's user's to write. */
static int save_target(spank_t sp)
{
    char cwd[PATH_MAX] = "", dir[PATH_MAX];
    uid_t uid;
    gid_t gid;
    if (opt.save[0] != '/' && spank_getenv(sp, "PWD", cwd, sizeof(cwd)) != ESPANK_SUCCESS) {
        snprintf(step_error, sizeof(step_error), "--container-save=%s: a relative path, and the job has no "
                 "directory", opt.save);
        return -1;
    }
    snprintf(save_path, sizeof(save_path), "%s%s%s", opt.save[0] == '/' ? "" : cwd, opt.save[0] == '/' ? "" : "/",
             opt.save);
    snprintf(dir, sizeof(dir), "%s", save_path);
    *strrchr(dir, '/') = 0;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)
        return -1;
    pid_t pid = fork();
    int status = -1;
    if (pid == 0)  /* the user's own right to write there, not root's */
        _exit(setgroups(0, NULL) || setgid(gid) || setuid(uid) || access(dir[0] ? dir : "/", W_OK) ? 1 : 0);
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
        snprintf(step_error, sizeof(step_error), "--container-save=%s: %s is not a directory the job's user may "
                 "write to on this node", opt.save, dir[0] ? dir : "/");
        save_path[0] = 0;
        return -1;
    }
    return 0;
}

/* The container's file system (the overlay: image and the step's changes) as a squashfs
 * file, the job's user's, written to a temporary name and renamed: a failed or cut save
 * leaves no half file at PATH. */
static int save_container(spank_t sp)
{
    char tmp[PATH_MAX + 32], *slash = strrchr(save_path, '/');
    uid_t uid = 0;
    gid_t gid = 0;
    snprintf(tmp, sizeof(tmp), "%.*s/.%s.%d.tmp", (int)(slash - save_path), save_path, slash + 1, (int)getpid());
    char *argv[] = {"mksquashfs", rootfs, tmp, "-noappend", "-comp", "lz4", "-quiet", "-no-progress", NULL};
    spank_get_item(sp, S_JOB_UID, &uid);
    spank_get_item(sp, S_JOB_GID, &gid);
    if (run(argv) != 0 || chown(tmp, uid, gid) || rename(tmp, save_path)) {
        slurm_error("simcluster_pyxis: --container-save=%s: mksquashfs of the container failed", opt.save);
        unlink(tmp);
        return -1;
    }
    slurm_info("simcluster_pyxis: saved the container of the step to %s", save_path);
    return 0;
}

/* After each task, in slurmstepd: the last task of the node saves the container (pyxis does
 * it then too), before srun hears of the step's end: its next step may run the file. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    uint32_t tasks;
    if (!spank_remote(sp) || !step_mounted || !save_path[0] || get_u32(sp, S_JOB_LOCAL_TASK_COUNT, &tasks))
        return 0;
    if (++exited_tasks < tasks)
        return 0;
    return save_container(sp);
}

/* The step's end, in slurmstepd: its overlay goes (a named container's when no other step of
 * the job runs in it); an unnamed container's directory too. */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    if (!spank_remote(sp) || !step_mounted)
        return 0;
    step_mounted = 0;
    if (opt.name && opt.name[0]) {
        leave_named_container(sp);
        return 0;
    }
    if (umount2(rootfs, MNT_DETACH))
        slurm_error("simcluster_pyxis: unmount %s: %m", rootfs);
    remove_container(step_dir);
    return 0;
}

/* No slurm_spank_job_epilog: a plugin that has one makes slurmd start `slurmstepd spank
 * epilog` at the end of every job on every node, container or not (2-3 ms of CPU and a
 * 10 ms wait per job). A job's named containers are removed by the cluster's Epilog
 * script instead (configs/templates/epilog.sh.j2), which slurmd runs anyway. */
