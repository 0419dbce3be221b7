"""What a production slurm.conf says that a mirror keeps, and what it drops and why.

Kept: what changes the answer a job header gets (a partition's limits, the node shapes,
typed GPUs, features, the scheduler's and preemption's settings). Dropped: what belongs to
the production machines (hosts, ports, paths, auth, scripts, topology, timeouts) or what
the local machine decides (process tracking, task plugins). Keys are matched in any case;
the tables hold Slurm's spelling (Slurm 22.05's keys: a newer key would stop its slurmctld).
A key in no table is reported "unknown ... kept out".
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from provisioner.config.validate import NODE_OPTIONS, PARTITION_OPTIONS

# Global settings copied as slurmConf lines (they replace the built-in line of the same key).
GLOBAL_KEEP = (
    "SelectType", "SelectTypeParameters", "PreemptType", "PreemptMode", "PreemptParameters",
    "PreemptExemptTime", "FairShareDampeningFactor", "DefMemPerCPU", "DefMemPerNode", "DefMemPerGPU",
    "DefCpuPerGPU", "MaxMemPerCPU", "MaxMemPerNode", "MaxJobCount", "MaxArraySize", "MaxStepCount",
    "MaxTasksPerNode", "EnforcePartLimits", "JobRequeue", "OverTimeLimit", "KillWait", "KillOnBadExit",
    "SchedulerType", "SchedulerParameters", "SchedulerTimeSlice", "MpiDefault", "Licenses", "PrologFlags",
    "ResvOverRun", "RequeueExit", "RequeueExitHold", "MaxBatchRequeue", "DependencyParameters",
    "PropagateResourceLimits", "PropagateResourceLimitsExcept", "PropagatePrioProcess", "VSizeFactor",
    "PrivateData", "DisableRootJobs", "JobFileAppend", "CompleteWait", "InteractiveStepOptions",
    "LaunchParameters", "JobAcctGatherFrequency",
    "PriorityType", "PriorityCalcPeriod", "PriorityDecayHalfLife", "PriorityFavorSmall", "PriorityFlags",
    "PriorityMaxAge", "PriorityParameters", "PriorityUsageResetPeriod", "PriorityWeightAge", "PriorityWeightAssoc",
    "PriorityWeightFairshare", "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS",
    "PriorityWeightTRES",
)
# Settings that need slurmdbd: kept when the mirror has accounting, else dropped.
GLOBAL_ACCOUNTING = ("AccountingStorageEnforce", "AccountingStorageTRES",
                     "AccountingStoreFlags", "TrackWCKey")

# Plugins that Debian's Slurm has (a site-built one would stop slurmctld from starting).
PLUGINS = {
    "SelectType": ("select/cons_tres", "select/cons_res", "select/linear"),
    "SchedulerType": ("sched/backfill", "sched/builtin"),
    "PreemptType": ("preempt/none", "preempt/qos", "preempt/partition_prio"),
    "PriorityType": ("priority/basic", "priority/multifactor"),
    "MpiDefault": ("none", "pmi2", "pmix"),
}
# List-valued settings of which only some values can apply here: {key: (values kept, why others go)}.
VALUE_FILTERS = {
    "PrologFlags": (("alloc", "contain", "deferbatch", "nohold", "forcerequeueonfail", "serial"),
                    "X11 forwarding needs a display; other flags are not in this Slurm"),
    "LaunchParameters": (("use_interactive_step", "test_exec", "mem_sort", "send_gids", "disable_send_gids",
                          "mpir_use_nodeaddr", "lustre_no_flush"),
                         "they need the production hosts: nss_slurm, a Cray network ..."),
}

R_HOST = "one machine runs every daemon here"
R_PORT = "ports are picked free on this machine"
R_PATH = "a path of the production hosts; the cluster's own files live in its state directory"
R_LOG = "logging is the cluster's own: simcluster export-logs"
R_AUTH = "authentication is the cluster's private munge"
R_USER = "the daemons run as the user who runs up"
R_SCRIPT = "a script of the production hosts, not on this machine"
R_TOPO = "network topology of real switches; one machine has none"
R_MACHINE = "the machine decides: cgroups where it has them"
R_SUBMIT = "job submit plugins and CLI filters are site code, out of scope"
# The health check is kept (healthCheck: in the mirror's spec): the production program where it
# is on this machine, else the cluster's own GPU check at the production interval (like/mapping.py).
GLOBAL_HEALTH = ("HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState")
R_JOBCOMP = "job completion records are the site's"
R_NAME = "the cluster's name is the spec's: --name"
R_TIMEOUT = "timeouts and housekeeping are simcluster's own, short ones"
R_POWER = "power saving needs real hosts"
R_SPANK = ("SPANK plugins of plugstack.conf are not loaded; pyxis's --container-* options come from "
           "simcluster's own plugin where it is built (docs/containers.md)")
R_ENERGY = "needs the hosts' sensors"
R_FREQ = "CPU and GPU clocks need the real hardware"
R_DAEMON = "an option of the production daemons, not of what jobs see"
R_ACCOUNTING = "needs slurmdbd: the conf has no AccountingStorageType=accounting_storage/slurmdbd"
R_DBD = "the mirror's accounting is its own slurmdbd"

_DROP_GROUPS: Tuple[Tuple[str, Iterable[str]], ...] = (
    (R_HOST, ("SlurmctldHost", "ControlMachine", "ControlAddr", "BackupController", "BackupAddr",
              "SlurmctldAddr")),
    (R_DBD, ("AccountingStorageHost", "AccountingStorageBackupHost", "AccountingStorageExternalHost",
             "AccountingStoragePort", "AccountingStorageUser", "AccountingStoragePass", "AccountingStorageLoc",
             "DefaultStorageHost", "DefaultStorageLoc", "DefaultStoragePass", "DefaultStoragePort",
             "DefaultStorageType", "DefaultStorageUser")),
    (R_PORT, ("SlurmctldPort", "SlurmdPort", "SrunPortRange", "MpiParams")),
    (R_PATH, ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "PluginDir", "TmpFS",
              "JobCredentialPrivateKey", "JobCredentialPublicCertificate", "MailProg", "JobCheckpointDir",
              "SlurmctldLogFile", "SlurmdLogFile", "SlurmSchedLogFile")),
    (R_LOG, ("SlurmctldDebug", "SlurmdDebug", "DebugFlags", "LogTimeFormat", "SlurmctldSyslogDebug",
             "SlurmdSyslogDebug", "SlurmSchedLogLevel")),
    (R_AUTH, ("AuthType", "AuthInfo", "AuthAltTypes", "AuthAltParameters", "CredType", "CryptoType")),
    (R_USER, ("SlurmUser", "SlurmdUser")),
    (R_SCRIPT, ("Prolog", "Epilog", "TaskProlog", "TaskEpilog", "PrologSlurmctld", "EpilogSlurmctld",
                "SrunProlog", "SrunEpilog", "ResvProlog", "ResvEpilog", "UnkillableStepProgram",
                "RebootProgram", "SlurmctldPrimaryOnProg", "SlurmctldPrimaryOffProg")),
    (R_TOPO, ("TopologyPlugin", "TopologyParam", "RoutePlugin", "SwitchType", "SwitchParameters", "TreeWidth")),
    (R_MACHINE, ("ProctrackType", "TaskPlugin", "TaskPluginParam", "JobAcctGatherType", "JobAcctGatherParams",
                 "JobContainerType", "CoreSpecPlugin", "SlurmdParameters", "LaunchType", "CgroupPlugin")),
    (R_SUBMIT, ("JobSubmitPlugins", "CliFilterPlugins")),
    (R_JOBCOMP, ("JobCompType", "JobCompLoc", "JobCompHost", "JobCompPort", "JobCompUser", "JobCompPass",
                 "JobCompParams")),
    (R_NAME, ("ClusterName",)),
    (R_TIMEOUT, ("SlurmctldTimeout", "SlurmdTimeout", "MessageTimeout", "InactiveLimit", "BatchStartTimeout",
                 "UnkillableStepTimeout", "EioTimeout", "PrologEpilogTimeout", "TCPTimeout",
                 "GetEnvTimeout", "WaitTime", "MinJobAge", "KeepAliveTime", "ReturnToService", "EpilogMsgTime",
                 "SlurmctldPingInterval", "FirstJobId", "MaxJobId")),
    (R_POWER, ("SuspendProgram", "ResumeProgram", "ResumeFailProgram", "SuspendTime", "SuspendRate",
               "ResumeRate", "SuspendTimeout", "ResumeTimeout", "SuspendExcNodes", "SuspendExcParts",
               "SuspendExcStates", "PowerParameters", "PowerPlugin", "MaxNodeCount")),
    (R_SPANK, ("PlugStackConfig",)),
    (R_ENERGY, ("AcctGatherEnergyType", "AcctGatherNodeFreq", "AcctGatherProfileType",
                "AcctGatherInterconnectType", "AcctGatherFilesystemType", "ExtSensorsType", "ExtSensorsFreq")),
    (R_FREQ, ("CpuFreqDef", "CpuFreqGovernors", "GpuFreqDef")),
    ("a site's own priority plugin is not installed here", ("PrioritySiteFactorPlugin",
                                                            "PrioritySiteFactorParameters")),
    (R_DAEMON, ("SlurmctldParameters", "CommunicationParameters", "HashPlugin", "ReconfigFlags", "MaxDBDMsgs",
                "FederationParameters", "BcastParameters", "BcastExclude", "GroupUpdateForce",
                "GroupUpdateTime", "MailDomain", "UsePAM", "X11Parameters", "MCSPlugin", "MCSParameters",
                "BurstBufferType", "NodeFeaturesPlugins", "MemLimitEnforce", "FastSchedule")),
)
GLOBAL_DROP: Dict[str, str] = {key: reason for reason, keys in _DROP_GROUPS for key in keys}

# NodeName options. Kept ones become the node's spec keys or options (validate.NODE_OPTIONS).
NODE_KEEP = ("NodeName", "CPUs", "RealMemory", "Gres", "Features", "Port") + NODE_OPTIONS
NODE_ALIASES = {"feature": "Features", "procs": "CPUs"}
NODE_DROP = {
    "NodeHostname": R_HOST, "NodeAddr": R_HOST, "BcastAddr": R_HOST,
    "State": "node states are the cluster's: every node starts idle",
    "Reason": "node states are the cluster's: every node starts idle",
    "CoreSpecCount": "core and memory specialization needs the real cores",
    "CpuSpecList": "core and memory specialization needs the real cores",
    "MemSpecLimit": "core and memory specialization needs the real cores",
    "CpuBind": "CPU binding needs the real cores",
    "TRESWeights": "node billing weights are not among simcluster's node options",
    "Comment": "informational", "Extra": "informational",
}

# PartitionName options. Kept ones are validate.PARTITION_OPTIONS plus the spec's own keys.
PARTITION_KEEP = ("PartitionName", "Nodes", "Default", "MaxTime") + PARTITION_OPTIONS
PARTITION_ALIASES = {"shared": "OverSubscribe"}
PARTITION_DROP = {
    "AllowGroups": "Unix groups are this machine's: jobs here run as you, in none of production's groups",
    "AllocNodes": "jobs are submitted from this machine, not from production's login nodes",
    "PowerDownOnIdle": R_POWER, "SuspendTime": R_POWER, "SuspendTimeout": R_POWER, "ResumeTimeout": R_POWER,
    "CpuBind": "CPU binding needs the real cores",
    "ExclusiveTopo": R_TOPO,
}


def canonical(key: str, *tables: Iterable[str]) -> Optional[str]:
    """Slurm's spelling of ``key`` if one of ``tables`` has it (any case), else None."""
    low = key.lower()
    for table in tables:
        for k in table:
            if k.lower() == low:
                return k
    return None


def global_reason(key: str) -> Optional[str]:
    """Why a global key is dropped (None: it is not a dropped one)."""
    k = canonical(key, GLOBAL_DROP)
    return GLOBAL_DROP[k] if k else None
