#!/bin/sh
# opshooks database, first start of the primary. Run once by the official
# image's entrypoint (from /docker-entrypoint-initdb.d) right after initdb,
# while PostgreSQL listens on its socket only.
#
# Creates the role standbys clone and stream from, and lets it connect for
# replication with a password. Values come from the environment
# (REPLICATION_PASSWORD), and reach SQL through psql variables, which
# quote them, never through this text.
#
# Under synchronous replication this temporary server already has the
# StatefulSet's synchronous_standby_names (the entrypoint passes it every
# `-c` argument) and no standby exists yet: a commit here would wait for
# ever. This session commits locally; nothing is acknowledged to anyone
# before the server proper starts.
set -eu
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    -v repl_password="$REPLICATION_PASSWORD" <<'SQL'
SET synchronous_commit = local;
SELECT format('CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD %L', :'repl_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'replicator')
\gexec
SQL
# Replication connections match only "replication" lines in pg_hba.conf.
echo "host replication replicator all scram-sha-256" >>"$PGDATA/pg_hba.conf"
