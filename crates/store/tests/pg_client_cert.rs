//! Client certificates (`sslcert`, `sslkey`) against a real PostgreSQL that
//! asks for one: a throwaway cluster (`initdb` in a temporary directory, on
//! a port of its own, TLS with certificates from a CA made here, and `cert`
//! authentication over TCP, but for one role that signs in with a password),
//! so that the shared test server's configuration is never touched. A
//! refused sign-in is `database_unavailable`, with the server's reason. Skipped, saying why, where the
//! PostgreSQL server binaries are not installed or cannot be run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use shepherd_store::{Store, StoreConfig};

/// The directory of `initdb`, `pg_ctl` and `postgres`.
fn server_bin() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Some(dir);
        }
    }
    // Debian installs the server outside PATH, one directory per version.
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A PostgreSQL cluster of this test's own; stopped and removed on drop.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// PostgreSQL refuses to run as root: then it runs as `postgres`.
    as_postgres: bool,
}

impl Cluster {
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// Makes and starts a cluster whose TLS certificate `server` signed
    /// (PEM certificate, PEM key) and which trusts client certificates
    /// signed by the CA in `ca_pem`.
    fn start(server: (&str, &str), ca_pem: &str) -> Result<Cluster, String> {
        let bin = server_bin().ok_or("no PostgreSQL server binaries (initdb) found")?;
        let dir = std::env::temp_dir().join(format!(
            "shepherd-pg-cert-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = shepherd_testkit::free_port();
        let cluster = Cluster {
            dir: dir.clone(),
            bin,
            port,
            as_postgres: is_root(),
        };
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text);
        write("server.pem", server.0).map_err(|e| e.to_string())?;
        write("server.key", server.1).map_err(|e| e.to_string())?;
        write("ca.pem", ca_pem).map_err(|e| e.to_string())?;
        // The server refuses a key others can read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .map_err(|e| e.to_string())?;
        if cluster.as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err("cannot hand the cluster's directory to the postgres user".into());
            }
        }
        let data = dir.join("data");
        let out = cluster
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let d = dir.display();
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{d}'\n\
             ssl = on\nssl_cert_file = '{d}/server.pem'\nssl_key_file = '{d}/server.key'\n\
             ssl_ca_file = '{d}/ca.pem'\nfsync = off\nmax_connections = 40\nshared_buffers = 16MB\n"
        );
        let append = |name: &str, text: &str, replace: bool| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(!replace)
                .write(true)
                .truncate(replace)
                .open(data.join(name))?;
            f.write_all(text.as_bytes())
        };
        append("postgresql.conf", &conf, false).map_err(|e| e.to_string())?;
        // Over TCP only TLS with a client certificate the CA signed, whose
        // common name is the user: nothing else gets in. One role (made by
        // the test) signs in with a password instead.
        append(
            "pg_hba.conf",
            "local all all trust\nhostssl all password_user 127.0.0.1/32 scram-sha-256\n\
             hostssl all all 127.0.0.1/32 cert\n",
            true,
        )
        .map_err(|e| e.to_string())?;
        let out = cluster
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "start"])
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if !out.status.success() {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            return Err(format!(
                "the cluster did not start: {}{log}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(cluster)
    }

    fn url(&self, params: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?{params}",
            self.port
        )
    }

    /// A connection over the Unix socket (trusted), to look at the server's side.
    async fn local(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::Config::new()
            .host_path(&self.dir)
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(tokio_postgres::NoTls)
            .await
            .expect("the cluster's socket");
        tokio::spawn(conn);
        client
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA; `leaf` makes a certificate it signs, as (certificate PEM, key PEM).
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn leaf(&self, names: &[&str], common_name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

async fn open(url: String) -> Result<Store, shepherd_core::Error> {
    Store::open(&StoreConfig::new(url)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_authenticates_to_a_server_that_asks_for_one() {
    let ca = Ca::new("shepherd test CA");
    let (server_cert, server_key) = ca.leaf(&["127.0.0.1", "localhost"], "localhost");
    let cluster = match Cluster::start((&server_cert, &server_key), &ca.issuer.pem()) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let files = std::env::temp_dir().join(format!("shepherd-pg-client-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let _files = common::TempDir(files.clone());
    let root = write(&files, "ca.pem", &ca.issuer.pem());
    let (cert, key) = ca.leaf(&[], "postgres");
    let cert = write(&files, "client.pem", &cert);
    let key = write(&files, "client.key", &key);

    let verified = format!("sslmode=verify-full&sslrootcert={root}");
    let store = open(cluster.url(&format!(
        "{verified}&sslcert={cert}&sslkey={key}&application_name=certified"
    )))
    .await
    .expect("the CA's certificate for user postgres gets in");
    store
        .head()
        .await
        .expect("a read over the certified connection");
    // The server saw the certificate: its subject is on every connection.
    let seen = cluster
        .local()
        .await
        .query(
            "SELECT s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name LIKE 'certified%'",
            &[],
        )
        .await
        .unwrap();
    assert!(!seen.is_empty(), "the store's connections are listed");
    for row in &seen {
        let dn: Option<String> = row.get(0);
        assert_eq!(dn.as_deref(), Some("/CN=postgres"), "client certificate");
    }
    store.close();
    cluster
        .local()
        .await
        .batch_execute("CREATE ROLE password_user LOGIN PASSWORD 'right'")
        .await
        .unwrap();

    // Without a certificate, or with one from another CA, `cert`
    // authentication turns the connection away.
    let other = Ca::new("another CA");
    let (rogue, rogue_key) = other.leaf(&[], "postgres");
    let rogue = write(&files, "rogue.pem", &rogue);
    let rogue_key = write(&files, "rogue.key", &rogue_key);
    for (params, refusal) in [
        (verified.clone(), "requires a valid client certificate"),
        // The server ends the handshake: it knows no such CA.
        (
            format!("{verified}&sslcert={rogue}&sslkey={rogue_key}"),
            "alert: UnknownCA",
        ),
    ] {
        match open(cluster.url(&params)).await {
            Ok(s) => {
                s.close();
                panic!("{params}: connected without the CA's client certificate");
            }
            Err(e) => {
                assert!(e.message.contains(refusal), "{params}: {e:?}");
                // A refusal is the database being unusable, as when it is
                // unreachable: not an internal error.
                assert_eq!(e.code, "database_unavailable", "{params}: {e:?}");
            }
        }
    }
    // A refused sign-in says so, with the server's reason (SQLSTATE class 28).
    match open(cluster.url(&verified).replacen(
        "postgres://postgres@",
        "postgres://password_user:wrong@",
        1,
    ))
    .await
    {
        Ok(s) => {
            s.close();
            panic!("connected with a wrong password");
        }
        Err(e) => {
            assert_eq!(e.code, "database_unavailable", "{e:?}");
            assert!(
                e.message.contains("refused authentication")
                    && e.message.contains("password authentication failed"),
                "{e:?}"
            );
        }
    }
    let err = open(cluster.url(&verified))
        .await
        .err()
        .expect("no certificate, no entry");
    assert!(
        err.message.contains("refused authentication (28000)"),
        "{err:?}"
    );

    // `sslrootcert=system`: the server's chain is checked against the
    // operating system's trust store, which `SSL_CERT_FILE` names. This is
    // the only test of its binary, so setting the variable races nothing.
    let identity = format!("sslcert={cert}&sslkey={key}&application_name=system_roots");
    std::env::set_var("SSL_CERT_FILE", &root);
    let store = open(cluster.url(&format!("sslrootcert=system&{identity}")))
        .await
        .expect("the system store holds the server's CA");
    store
        .head()
        .await
        .expect("a read over the verified connection");
    store.close();
    // A system store without the server's CA turns it away.
    let other_root = write(&files, "other-ca.pem", &other.issuer.pem());
    std::env::set_var("SSL_CERT_FILE", &other_root);
    let err = open(cluster.url(&format!("sslrootcert=system&{identity}")))
        .await
        .err()
        .expect("a CA the system does not trust");
    assert_eq!(err.code, "database_unavailable", "{err:?}");
    assert!(err.message.contains("UnknownIssuer"), "{err:?}");
    // A store with nothing usable in it stops the start, saying where it looked.
    let empty = write(&files, "empty.pem", "no certificate here\n");
    std::env::set_var("SSL_CERT_FILE", &empty);
    let empty_dir = files.join("no-certs");
    std::fs::create_dir_all(&empty_dir).unwrap();
    // This machine may name its own directory of certificates.
    let cert_dir = std::env::var_os("SSL_CERT_DIR");
    std::env::set_var("SSL_CERT_DIR", &empty_dir);
    let err = open(cluster.url(&format!("sslrootcert=system&{identity}")))
        .await
        .err()
        .expect("an empty system store");
    assert_eq!(err.code, "bad_database_url", "{err:?}");
    assert!(err.message.contains("SSL_CERT_FILE"), "{err:?}");
    std::env::remove_var("SSL_CERT_FILE");
    match cert_dir {
        Some(dir) => std::env::set_var("SSL_CERT_DIR", dir),
        None => std::env::remove_var("SSL_CERT_DIR"),
    }
}
