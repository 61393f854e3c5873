#!/usr/bin/env python3
"""The real control loop: Metacontroller, kube-scheduler and kwok drive every
operator's whole life against opshooks, and the cluster's state is asserted.

Run by loop.sh, which brings up the control plane, the fake node and the
chart (its CompositeControllers pointing at http://127.0.0.1:PORT). This
program starts opshooks on PORT and Metacontroller itself (it kills and
restarts both in the fault scenarios), watches the whole cluster for the
invariants in invariants.py from the first second to the last, runs the
scenarios, and prints a table. Exit status 1 on any failed scenario or
violated invariant.

Usage: loop.py --dir DIR --port PORT --opshooks BIN --metacontroller BIN
               [--strategies dynamic-apply,server-side-apply] [--only NAME,...]
               [--opshooks-arg=--FLAG=VALUE ...] [--ca-file PEM [--client-cert CRT,KEY]]
With --ca-file opshooks serves HTTPS (its TLS flags come as --opshooks-arg)
and its readiness is checked with that CA (and that client certificate).

The harness (processes, waits, kwok stages, the runner) is harness.py; the
scenarios are under scenarios/, one file an operator, one for the Database's restore,
one for its failover, one for its switchover and
minor update, one for its placement over several nodes, one for its storage growth, one for the faults and one for the simulator's twin (fidelity.py). This file lists them.
"""

from harness import main
from scenarios.autoscale import scenario_autoscale
from scenarios.backup import scenario_backup
from scenarios.database import scenario_database, scenario_delete, scenario_retain, scenario_snapshot_fails
from scenarios.dbreal import scenario_real_database, scenario_real_tls_cert_manager
from scenarios.dbrealbackup import scenario_real_backup_restore, scenario_real_catch_up, scenario_real_major_upgrade
from scenarios.dbrealfault import (
    scenario_real_kill,
    scenario_real_kill_restart,
    scenario_real_lost_volume,
    scenario_real_partition,
    scenario_real_pause,
    scenario_real_pause_async,
    scenario_real_recreate,
    scenario_real_rollout,
    scenario_real_rto,
    scenario_real_stale_standby,
    scenario_real_stall,
    scenario_real_switchover,
    scenario_real_switchover_refused,
)
from scenarios.failover import scenario_failover
from scenarios.faults import scenario_hook_outage, scenario_invalid_spec, scenario_metacontroller_restarts
from scenarios.fidelity import scenario_fidelity
from scenarios.memcached import scenario_memcached
from scenarios.placement import scenario_placement
from scenarios.restore import scenario_restore, scenario_restore_fails, scenario_restore_over_retained
from scenarios.storage import scenario_grow
from scenarios.switchover import scenario_minor_update, scenario_switchover
from scenarios.webserver import scenario_webserver, scenario_webserver_brief

LIFECYCLE = [
    ("WebServer", "web", scenario_webserver),
    ("Memcached", "mc", scenario_memcached),
    ("WebServer and Memcached scaled by an HPA", "hpa", scenario_autoscale),
    ("Backup", "bk", scenario_backup),
    ("Database lifecycle", "db", scenario_database),
    ("Database delete, snapshot fails", "dbsnap", scenario_snapshot_fails),
    ("Database delete, Retain", "dbkeep", scenario_retain),
    ("Database delete, Delete", "dbdrop", scenario_delete),
    ("Database restore", "dbrestore", scenario_restore),
    ("Database restore fails, retried", "dbrestorefail", scenario_restore_fails),
    ("Database again over Retain volumes", "dbrestorekeep", scenario_restore_over_retained),
    ("Database failover", "dbfailover", scenario_failover),
    ("Database switchover", "dbswitchover", scenario_switchover),
    ("Database minor update, rolled", "dbminor", scenario_minor_update),
    ("Database placement, drain held", "dbplacement", scenario_placement),
    ("Database storage grown", "dbgrow", scenario_grow),
    ("Invalid spec refused", "invalid", scenario_invalid_spec),
    ("Simulator matches the real loop", "fid", scenario_fidelity),
]
FAULTS = [
    ("opshooks outage", "outage", scenario_hook_outage),
    ("Metacontroller restarts", "restart", scenario_metacontroller_restarts),
]
# Run only when --only names them.
ON_REQUEST = [
    ("WebServer created and deleted", "web-brief", scenario_webserver_brief),
    # Needs the process node: OPSHOOKS_E2E_PROC_NODE=1 loop.sh --only dbreal,dbrealbackup,dbrealupgrade,dbrealcatchup,dbrealkill,dbrealrestart,dbrealpause,dbrealpauseasync,dbrealstall,dbrealpartition,dbreallostvolume,dbrealrecreate,dbrealstale,dbrealswitch,dbrealrollout,dbrealrefused.
    ("Database on real PostgreSQL", "dbreal", scenario_real_database),
    ("Real PostgreSQL, backed up to S3 and restored", "dbrealbackup", scenario_real_backup_restore),
    ("Real PostgreSQL, a major upgrade 15 to 18", "dbrealupgrade", scenario_real_major_upgrade),
    ("Real PostgreSQL, a standby caught up from the archive", "dbrealcatchup", scenario_real_catch_up),
    ("Real PostgreSQL, primary killed", "dbrealkill", scenario_real_kill),
    ("Real PostgreSQL, primary restarted", "dbrealrestart", scenario_real_kill_restart),
    ("Real PostgreSQL, primary paused", "dbrealpause", scenario_real_pause),
    ("Real PostgreSQL, paused, async", "dbrealpauseasync", scenario_real_pause_async),
    ("Real PostgreSQL, the primary back during a failover", "dbrealstall", scenario_real_stall),
    ("Real PostgreSQL, partitioned", "dbrealpartition", scenario_real_partition),
    ("Real PostgreSQL, the primary's volume lost", "dbreallostvolume", scenario_real_lost_volume),
    ("Real PostgreSQL, re-created over retained volumes", "dbrealrecreate", scenario_real_recreate),
    ("Real PostgreSQL, a standby disconnected long", "dbrealstale", scenario_real_stale_standby),
    ("Real PostgreSQL, switchover", "dbrealswitch", scenario_real_switchover),
    ("Real PostgreSQL, minor-image rollout", "dbrealrollout", scenario_real_rollout),
    ("Real PostgreSQL, switchover refused", "dbrealrefused", scenario_real_switchover_refused),
    # A benchmark (BENCHMARKS.md): ten failovers at the defaults, some 12 minutes.
    ("Real PostgreSQL, RTO at the defaults", "dbrealrto", scenario_real_rto),
    ("Real PostgreSQL, TLS from cert-manager", "dbrealtls", scenario_real_tls_cert_manager),
]


if __name__ == "__main__":
    main(__doc__, LIFECYCLE, FAULTS, ON_REQUEST)
