#!/bin/sh
# opshooks database, the monitoring role Job (spec.monitoring). Runs once
# the primary serves: makes the exporters' role, a member of pg_monitor
# and nothing else (no superuser, no replication, no database of its own,
# a few connections), and sets its password from the Secret, so a rerun
# (a new password, a new major's data) changes nothing else. Statement
# logging is off for the session: a statement carries the password.
#
# Connection: PGHOST, PGPORT, PGUSER (the superuser), PGPASSWORD.
# Values: MONITOR_USER, MONITOR_PASSWORD. They reach SQL only through psql
# variables quoted with %I and %L.
set -eu
psql -v ON_ERROR_STOP=1 --dbname postgres \
    -v monitor_user="$MONITOR_USER" -v monitor_password="$MONITOR_PASSWORD" <<'SQL'
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = 'panic';
SET pg_stat_statements.track_utility = off;
SELECT format('CREATE ROLE %I', :'monitor_user')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'monitor_user')
\gexec
SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 5 PASSWORD %L',
              :'monitor_user', :'monitor_password')
\gexec
SELECT format('GRANT pg_monitor TO %I', :'monitor_user')
\gexec
SQL
echo "monitor: the role $MONITOR_USER is in place"
