"""The compose stack's PostgreSQL roles: init.sql creates them without a password, passwords.sh gives them
the generated ones (run here against a real server, as the image's entrypoint runs it at first start)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.pg_harness import pg_bin
from tests.state.test_store import postgres_url  # noqa: F401 - a fixture: one PostgreSQL server per session

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "postgres"


def scram_matches(stored: str, password: str) -> bool:
    """Whether PostgreSQL's SCRAM-SHA-256 verifier ``stored`` is of ``password`` (RFC 5802 / 7677)."""
    head, keys = stored.split("$", 1)[1].split("$")
    iterations, salt = head.split(":")
    stored_key, server_key = keys.split(":")
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client = hmac.new(salted, b"Client Key", "sha256").digest()
    return (base64.b64encode(hashlib.sha256(client).digest()).decode() == stored_key
            and base64.b64encode(hmac.new(salted, b"Server Key", "sha256").digest()).decode() == server_key)


def test_roles_get_the_generated_passwords(postgres_url: str, tmp_path: Path) -> None:  # noqa: F811
    init = (DEPLOY / "init.sql").read_text()
    sql = "\n".join(x for x in init.splitlines() if not x.startswith("--"))
    assert "PASSWORD" not in sql.upper()  # no password written in the recipe
    tag = uuid.uuid4().hex[:8]  # roles are cluster-wide: names of this test's own on the session's server
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    renamed = init.replace("airflow", f"airflow{tag}").replace("mirror_state", f"state{tag}").replace(
        "USER mirror", f"USER mirror{tag}").replace("OWNER mirror", f"OWNER mirror{tag}")
    with engine.connect() as c:
        for statement in (s.strip() for s in renamed.split(";")):
            lines = [x for x in statement.splitlines() if not x.startswith("--")]
            if "".join(lines).strip():
                c.execute(text("\n".join(lines)))
    secrets = {f"airflow{tag}": uuid.uuid4().hex, f"mirror{tag}": uuid.uuid4().hex}
    for role, password in secrets.items():
        (tmp_path / f"{role}.password").write_text(password)
    script = (DEPLOY / "passwords.sh").read_text().replace("for role in airflow mirror",
                                                          f"for role in airflow{tag} mirror{tag}")
    (tmp_path / "passwords.sh").write_text(script)
    url = engine.url
    psql = pg_bin("psql")
    assert psql is not None
    env = {**os.environ, "DB_SECRETS": str(tmp_path), "POSTGRES_USER": "postgres", "PGHOST": str(url.host),
           "PGPORT": str(url.port), "PATH": f"{Path(psql).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", str(tmp_path / "passwords.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    with engine.connect() as c:
        rows = dict(c.execute(text("SELECT rolname, rolpassword FROM pg_authid WHERE rolname = ANY(:r)"),
                              {"r": list(secrets)}).all())
        for role, password in secrets.items():  # the hash of the generated password, not of a known one
            assert scram_matches(rows[role], password), (role, rows[role])
            assert not scram_matches(rows[role], role.rstrip("0123456789abcdef") or role)
            verified = c.execute(text("SELECT rolcanlogin FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar()
            assert verified is True
            c.execute(text(f'DROP DATABASE IF EXISTS "{"state" + tag if role.startswith("mirror") else role}"'))
            c.execute(text(f'DROP ROLE "{role}"'))
    engine.dispose()
