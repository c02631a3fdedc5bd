#!/usr/bin/env bash
# Makes sure PostgreSQL (Debian's postgresql) runs, with a role svc_test that may create the
# throwaway databases of the tests. Prints `export SVC_TEST_PG_URL=...` on stdout for eval;
# everything else goes to stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg postgresql
PG_VERSION=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h 2>/dev/null | awk '{print $4}' | grep -q online; then
  if ! pg_lsclusters -h 2>/dev/null | grep -q .; then
    say "creating PostgreSQL $PG_VERSION cluster"
    $SUDO pg_createcluster "$PG_VERSION" main >/dev/null
  fi
  say "starting PostgreSQL $PG_VERSION"
  # Its messages (e.g. "Removed stale pid file") go to stderr: stdout is eval'd by make.
  $SUDO pg_ctlcluster "$PG_VERSION" main start >&2
else
  say "PostgreSQL already running"
fi
PG_PORT=$(pg_lsclusters -h | awk '$4=="online"{print $3; exit}')
# A password role on loopback TCP: the tests create and drop one database per server they start.
$AS_POSTGRES psql -q -p "$PG_PORT" -v ON_ERROR_STOP=1 >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'svc_test') THEN
    CREATE ROLE svc_test LOGIN CREATEDB PASSWORD 'svc_test';
  END IF;
END \$\$;
SQL
say "PostgreSQL on 127.0.0.1:$PG_PORT, role svc_test"
echo "export SVC_TEST_PG_URL=postgres://svc_test:svc_test@127.0.0.1:$PG_PORT/postgres"
