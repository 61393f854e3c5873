#!/bin/sh
# opshooks database, initial configuration Job. Runs once the primary is
# ready: creates the application user and its database if they do not
# exist yet, and sets the user's password from the Secret when it does (a
# Database created again over retained volumes has a new Secret; the data
# keeps the earlier one's password; never a superuser's or the replicator's,
# whatever the user is named), so a rerun changes nothing else. Statement
# logging is off for the session: the statements carry the passwords.
#
# Connection: PGHOST, PGPORT, PGUSER (the superuser), PGPASSWORD.
# Values: APP_USER, APP_PASSWORD, APP_DATABASE. They reach SQL only through
# psql variables quoted with %I (identifiers) and %L (literals), so a name
# with a quote or a space is a name, not SQL.
set -eu
psql -v ON_ERROR_STOP=1 --dbname postgres \
    -v app_user="$APP_USER" -v app_password="$APP_PASSWORD" -v app_db="$APP_DATABASE" <<'SQL'
SET log_statement = 'none';
SET log_min_duration_statement = -1;
SET log_min_error_statement = 'panic';
SET pg_stat_statements.track_utility = off;
SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L', :'app_user', :'app_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_user')
\gexec
SELECT format('ALTER ROLE %I WITH PASSWORD %L', :'app_user', :'app_password')
FROM pg_roles WHERE rolname = :'app_user' AND NOT rolsuper AND NOT rolreplication
\gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'app_db', :'app_user')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'app_db')
\gexec
SQL
echo "init: user and database are in place"
