"""A real MIT Kerberos KDC on loopback and a cluster with a ``SASL_PLAINTEXT`` listener for GSSAPI.

The KDC (``krb5kdc`` from Debian's krb5-kdc, database made by ``kdb5_util``/``kadmin.local``) lives
in a temporary directory with its own realm, ``kdc.conf`` and ``krb5.conf``; nothing under /etc is
read or written (``KRB5_CONFIG`` / ``KRB5_KDC_PROFILE`` point at the private files). Principals get
random keys, exported to keytabs.

The broker's service principal is ``kafka/127.0.0.1``: librdkafka (Cyrus SASL) asks for
``<sasl.kerberos.service.name>/<host>`` with the host of the address it connects to (bootstrap and
advertised listener are both ``127.0.0.1`` here) and, with ``rdns = false`` and
``dns_canonicalize_hostname = false``, does not rewrite it.

The broker keeps its PLAINTEXT listener (inter-broker traffic and the harness's own admin as the super
user ``User:ANONYMOUS``); the mirror under test authenticates as ``mirror@MIRROR.TEST``, which Kafka's
default principal mapping turns into ``User:mirror`` (not a super user).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mirror_core.devcluster.local_cluster import LocalCluster, free_port
from tests.kafka_harness import new_cluster

REALM = "MIRROR.TEST"
SERVICE = "kafka"
BROKER_HOST = "127.0.0.1"
CLIENT = "mirror"
KRB5_JAAS = "com.sun.security.auth.module.Krb5LoginModule required"
KDC_BINARIES = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def missing_tools() -> list[str]:
    """The MIT Kerberos programs the harness needs that are not installed (scripts/ensure-gssapi-client.sh
    installs them); the daemons live in /usr/sbin, which is not always on a non-root PATH."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [t for t in KDC_BINARIES if shutil.which(t, path=path) is None]


def _tool(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = shutil.which(name, path=path)
    if found is None:
        raise RuntimeError(f"{name} not found: install krb5-kdc, krb5-admin-server and krb5-user")
    return found


@dataclass
class Kdc:
    """A running ``krb5kdc`` for one realm; :meth:`principal` adds principals and writes their keytabs."""

    directory: Path
    port: int
    realm: str = REALM
    proc: subprocess.Popen[bytes] | None = None

    @property
    def krb5_conf(self) -> Path:  # clients: KRB5_CONFIG, the JVM's -Djava.security.krb5.conf
        return self.directory / "krb5.conf"

    @property
    def log_file(self) -> Path:
        return self.directory / "kdc.log"

    def env(self, ccache: Path | None = None) -> dict[str, str]:
        """Environment for a Kerberos client (kinit, librdkafka) using this KDC, with its own ticket cache."""
        env = dict(os.environ, KRB5_CONFIG=str(self.krb5_conf), KRB5_KDC_PROFILE=str(self.directory / "kdc.conf"))
        env["KRB5CCNAME"] = f"FILE:{ccache or self.directory / 'ccache-default'}"
        env.pop("KRB5_CLIENT_KTNAME", None)
        return env

    def _write_configs(self) -> None:
        d = self.directory
        # Both the KDC and the clients use TCP (udp_preference_limit = 1), so the TCP port is what counts;
        # the UDP port of the same number is just kept away from the default 88.
        (d / "kdc.conf").write_text(f"""[kdcdefaults]
 kdc_ports = {self.port}
 kdc_tcp_ports = {self.port}

[realms]
 {self.realm} = {{
  database_name = {d / 'principal'}
  key_stash_file = {d / 'stash'}
  acl_file = {d / 'kadm5.acl'}
  kdc_ports = {self.port}
  kdc_tcp_ports = {self.port}
  max_life = 1h
  max_renewable_life = 1h
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }}

[logging]
 kdc = FILE:{self.log_file}
 default = FILE:{self.log_file}
""")
        (d / "kadm5.acl").write_text("")
        # No DNS anywhere: realm and KDC are given, host names are used as written (rdns, canonicalize).
        self.krb5_conf.write_text(f"""[libdefaults]
 default_realm = {self.realm}
 dns_lookup_realm = false
 dns_lookup_kdc = false
 rdns = false
 dns_canonicalize_hostname = false
 udp_preference_limit = 1
 ticket_lifetime = 1h
 forwardable = false

[realms]
 {self.realm} = {{
  kdc = 127.0.0.1:{self.port}
 }}

[domain_realm]
 {BROKER_HOST} = {self.realm}
 localhost = {self.realm}
""")

    def _run(self, *cmd: str) -> str:
        res = subprocess.run(cmd, capture_output=True, text=True, env=self.env(), timeout=60, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
        return res.stdout

    def _kadmin(self, query: str) -> str:
        out = self._run(_tool("kadmin.local"), "-r", self.realm, "-q", query)
        return out

    def start(self, timeout: float = 30) -> Kdc:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._write_configs()
        # The master key only protects the throw-away database; -s stashes it so krb5kdc starts unattended.
        self._run(_tool("kdb5_util"), "create", "-s", "-r", self.realm, "-P", "kdc-master-key-for-tests")
        out = open(self.directory / "krb5kdc.out", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([_tool("krb5kdc"), "-n", "-r", self.realm], env=self.env(), stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krb5kdc exited with {self.proc.returncode}; see {self.log_file}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"krb5kdc not listening on {self.port} after {timeout:.0f}s; see {self.log_file}")

    def principal(self, name: str, keytab: Path | None = None) -> Path:
        """Add ``name@realm`` with a random key and export it to a keytab (``<dir>/<name>.keytab`` by default)."""
        keytab = keytab or self.directory / (name.replace("/", "_") + ".keytab")
        self._kadmin(f"addprinc -randkey {name}@{self.realm}")
        self._kadmin(f"ktadd -k {keytab} {name}@{self.realm}")
        return keytab

    def delete(self, name: str) -> None:
        """Remove ``name@realm`` from the KDC (its keytabs stay, now useless)."""
        self._kadmin(f"delprinc -force {name}@{self.realm}")

    def kinit(self, principal: str, keytab: Path, ccache: Path) -> subprocess.CompletedProcess[str]:
        """``kinit -kt`` into ``ccache``; the result is returned, not checked (tests expect failures too)."""
        return subprocess.run([_tool("kinit"), "-kt", str(keytab), principal], capture_output=True, text=True,
                              env=self.env(ccache), timeout=30, check=False)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass(frozen=True)
class KerberosCluster:
    cluster: LocalCluster
    kdc: Kdc
    client_principal: str  # mirror@MIRROR.TEST
    client_keytab: Path

    @property
    def sasl_bootstrap(self) -> str:
        return self.cluster.bootstrap_for("SASL_PLAINTEXT")

    @property
    def plain_bootstrap(self) -> str:  # the harness's own super-user access
        return self.cluster.bootstrap

    def client_env(self, ccache: Path) -> dict[str, str]:
        """Environment for a librdkafka client process: this KDC, a ticket cache of its own."""
        return self.kdc.env(ccache)

    def librdkafka_settings(self, principal: str | None = None, keytab: Path | None = None) -> dict[str, str]:
        """The librdkafka client settings for the GSSAPI listener (``kinit`` runs with ``KRB5_CONFIG``)."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": SERVICE,
            "sasl.kerberos.principal": principal or self.client_principal,
            "sasl.kerberos.keytab": str(keytab or self.client_keytab),
        }

    def lines(self, alias: str, principal: str | None = None, keytab: Path | None = None,
              java: bool = True) -> list[str]:
        """mm2.properties lines for the GSSAPI listener: the Java/MM2 form users have (``java``), or the
        librdkafka names, which the config passes through unchanged."""
        principal, keytab = principal or self.client_principal, keytab or self.client_keytab
        if java:
            return [
                f"{alias}.security.protocol = SASL_PLAINTEXT",
                f"{alias}.sasl.mechanism = GSSAPI",
                f"{alias}.sasl.kerberos.service.name = {SERVICE}",
                f'{alias}.sasl.jaas.config = {KRB5_JAAS} useKeyTab=true storeKey=true keyTab="{keytab}" '
                f'principal="{principal}";',
            ]
        return [f"{alias}.{k} = {v}" for k, v in self.librdkafka_settings(principal, keytab).items()
                if k != "bootstrap.servers"]


def new_kerberos_cluster(name: str, root: Path, kdc: Kdc) -> LocalCluster:
    """A cluster with PLAINTEXT (harness) and SASL_PLAINTEXT/GSSAPI (service principal ``kafka/127.0.0.1``)."""
    service = f"{SERVICE}/{BROKER_HOST}@{kdc.realm}"
    keytab = kdc.principal(f"{SERVICE}/{BROKER_HOST}", kdc.directory / "kafka.keytab")
    cluster = new_cluster(name, root, **{
        "sasl.enabled.mechanisms": "GSSAPI",
        "sasl.kerberos.service.name": SERVICE,
        "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
            f'{KRB5_JAAS} useKeyTab=true storeKey=true keyTab="{keytab}" principal="{service}";',
    })
    cluster.extra_listeners["SASL_PLAINTEXT"] = free_port()
    # The JVM reads no KRB5_CONFIG: it gets the KDC's krb5.conf as a system property.
    cluster.jvm_options.append(f"-Djava.security.krb5.conf={kdc.krb5_conf}")
    return cluster


@contextmanager
def running_kerberos_cluster(name: str, root: Path) -> Iterator[KerberosCluster]:
    """The KDC first (the broker logs in with its keytab at start-up), then the cluster; both stopped after."""
    kdc = Kdc(root / f"{name}-kdc", free_port())
    cluster: LocalCluster | None = None
    try:
        kdc.start()
        client_keytab = kdc.principal(CLIENT)
        cluster = new_kerberos_cluster(name, root, kdc)
        cluster.start()
        yield KerberosCluster(cluster, kdc, f"{CLIENT}@{kdc.realm}", client_keytab)
    finally:
        if cluster is not None:
            cluster.stop()
        kdc.stop()
