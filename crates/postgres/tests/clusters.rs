//! Real clusters (Debian's PostgreSQL 15, root, loop devices): the template, a provisioned
//! cluster reached through the front end, the owner's limits, clones of a running and of a
//! stopped cluster, a full disk, online growth, and that removal leaves nothing behind.
//!
//! One test function, so the template is made once (initdb ~2 s) and the steps share it;
//! `fsync` is off (tests only).

use async_trait::async_trait;
use pandastack_postgres::cluster::{self, ClusterDirs, RunSpec, StopMode};
use pandastack_postgres::frontend::{Admission, FrontEnd, Refusal, Session};
use pandastack_postgres::provision::{self, CloneSource, Provision};
use pandastack_postgres::secret::generate_password;
use pandastack_postgres::{storage, template, PgConfig, Tier};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

fn config(base: &Path) -> PgConfig {
    PgConfig {
        bin_dir: PathBuf::from("/usr/lib/postgresql/15/bin"),
        root: base.join("databases"),
        socket_root: PathBuf::from(format!("/run/pandastack/pg-test-{}", std::process::id())),
        fsync: false,
        os_user: "postgres".into(),
    }
}

const RUN: RunSpec = RunSpec {
    tier: Tier::G1,
    cpus: 1,
    fsync: false,
};

struct Cluster {
    dirs: ClusterDirs,
    database: String,
    role: String,
    owner: String,
    superuser: String,
}

async fn new_cluster(
    cfg: &PgConfig,
    t: &template::Template,
    id: &str,
    label: &str,
    mb: u64,
) -> Cluster {
    let dirs = ClusterDirs::new(cfg, id);
    let database = pandastack_postgres::names::database_name(Some(label));
    let role = pandastack_postgres::names::owner_role(&database);
    let (owner, superuser) = (generate_password(), generate_password());
    provision::provision(
        cfg,
        t,
        &Provision {
            dirs: &dirs,
            storage_mb: mb,
            run: RUN,
            database: &database,
            role: &role,
            owner_password: &owner,
            superuser_password: &superuser,
        },
    )
    .await
    .expect("provision");
    Cluster {
        dirs,
        database,
        role,
        owner,
        superuser,
    }
}

async fn owner_client(
    c: &Cluster,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::Config::new()
        .host_path(&c.dirs.socket_dir)
        .port(5432)
        .user(&c.role)
        .password(password)
        .dbname(&c.database)
        .connect(NoTls)
        .await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Admits loopback peers; every session holds the token (cancelling it ends them).
struct LoopbackOnly(PathBuf, CancellationToken);

#[async_trait]
impl Admission for LoopbackOnly {
    async fn admit(&self, _: &str, peer: SocketAddr) -> Result<Session, Refusal> {
        if peer.ip().is_loopback() {
            Ok(Session {
                socket_dir: self.0.clone(),
                guard: Box::new(()),
                end: self.1.clone(),
            })
        } else {
            Err(Refusal {
                sqlstate: "28000",
                message: "not from here".into(),
            })
        }
    }
}

/// Removes what a failed run left (postmasters, mounts, directories) without an async
/// runtime, so it also runs while a panic unwinds.
struct Cleanup {
    base: PathBuf,
    sockets: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.base.join("databases")) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let dir = e.path();
            if let Some(pid) = std::fs::read_to_string(dir.join("mnt/pgdata/postmaster.pid"))
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
            {
                let _ = std::process::Command::new("kill")
                    .args(["-QUIT", &pid.to_string()])
                    .status();
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(dir.join("mnt"))
                .status();
        }
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.base.join("databases"))
            .status();
        let _ = std::fs::remove_dir_all(&self.base);
        let _ = std::fs::remove_dir_all(&self.sockets);
    }
}

/// A database id unique to this run (cgroups and process titles are named by it).
fn id(n: u8) -> String {
    format!(
        "{n:x}{:07x}-0000-4000-8000-{:012x}",
        std::process::id(),
        rand_suffix()
    )
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 & 0xffff_ffff_ffff)
        .unwrap_or(0)
}

#[tokio::test]
async fn clusters_live_clone_fill_and_go() {
    let base = std::env::temp_dir().join(format!("ps-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let cfg = config(&base);
    let _cleanup = Cleanup {
        base: base.clone(),
        sockets: cfg.socket_root.clone(),
    };
    // As the server does: sandboxes starting meanwhile get slave copies of these mounts.
    pandastack_postgres::storage::share_root(&cfg.root)
        .await
        .expect("share the root");
    let t = template::ensure(&cfg).await.expect("template");
    // A second call finds the ready template.
    assert_eq!(template::ensure(&cfg).await.unwrap().dir, t.dir);

    let a = new_cluster(&cfg, &t, &id(0xa), "agent-memory", 256).await;
    assert_eq!(a.database, "agent_memory");
    let client = owner_client(&a, &a.owner).await.expect("owner connects");
    client
        .batch_execute("CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'kept')")
        .await
        .unwrap();

    // Through the front end over TCP.
    let fe = FrontEnd::new(vec![IpAddr::from([127, 0, 0, 1])], 41000..=41999);
    let end = CancellationToken::new();
    let binding = fe
        .bind(
            &a.dirs.id,
            None,
            Arc::new(LoopbackOnly(a.dirs.socket_dir.clone(), end.clone())),
        )
        .await
        .unwrap();
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/{}",
        a.role, a.owner, binding.port, a.database
    );
    let (tcp, conn) = tokio_postgres::connect(&url, NoTls)
        .await
        .expect("tcp through the front end");
    tokio::spawn(conn);
    let row = tcp
        .query_one("SELECT body FROM notes WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "kept");

    // What the owner may not do.
    for sql in [
        "CREATE ROLE intruder",
        "ALTER ROLE CURRENT_USER SUPERUSER",
        "SELECT pg_read_file('postgresql.conf')",
        "COPY notes FROM '/etc/passwd'",
        "CREATE DATABASE other",
    ] {
        let e = tcp.batch_execute(sql).await.expect_err(sql);
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {e:?}"
        );
    }
    let bad = tokio_postgres::connect(
        &url.replace(&format!("/{}", a.database), "/postgres"),
        NoTls,
    )
    .await;
    assert!(bad.is_err(), "the owner reaches only its own database");
    let wrong = tokio_postgres::connect(&url.replace(&a.owner, "wrong"), NoTls).await;
    assert!(wrong.is_err());
    // The server's side ends a spliced session (the listener stays).
    end.cancel();
    assert!(
        tcp.query_one("SELECT 1", &[]).await.is_err(),
        "a session outlived its end"
    );

    // A clone of the running cluster has the rows and its own passwords.
    let b_dirs = ClusterDirs::new(&cfg, &id(0xb));
    let (b_owner, b_super) = (generate_password(), generate_password());
    provision::clone(
        &cfg,
        &CloneSource {
            dirs: &a.dirs,
            superuser_password: &a.superuser,
            running: true,
        },
        &Provision {
            dirs: &b_dirs,
            storage_mb: 256,
            run: RUN,
            database: &a.database,
            role: &a.role,
            owner_password: &b_owner,
            superuser_password: &b_super,
        },
    )
    .await
    .expect("clone of a running cluster");
    let b = Cluster {
        dirs: b_dirs,
        database: a.database.clone(),
        role: a.role.clone(),
        owner: b_owner,
        superuser: b_super,
    };
    let bc = owner_client(&b, &b.owner)
        .await
        .expect("clone owner connects");
    let n: i64 = bc
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    assert!(
        owner_client(&b, &a.owner).await.is_err(),
        "the source's password does not open the clone"
    );
    drop(bc);

    // A clone of a stopped cluster.
    drop(tcp);
    drop(client);
    cluster::stop(&a.dirs, StopMode::Fast).await;
    assert!(cluster::running(&a.dirs).is_none());
    let c_dirs = ClusterDirs::new(&cfg, &id(0xc));
    let (c_owner, c_super) = (generate_password(), generate_password());
    provision::clone(
        &cfg,
        &CloneSource {
            dirs: &a.dirs,
            superuser_password: &a.superuser,
            running: false,
        },
        &Provision {
            dirs: &c_dirs,
            storage_mb: 256,
            run: RUN,
            database: &a.database,
            role: &a.role,
            owner_password: &c_owner,
            superuser_password: &c_super,
        },
    )
    .await
    .expect("clone of a stopped cluster");
    let c = Cluster {
        dirs: c_dirs,
        database: a.database.clone(),
        role: a.role.clone(),
        owner: c_owner,
        superuser: c_super,
    };
    let cc = owner_client(&c, &c.owner).await.unwrap();
    let n: i64 = cc
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    drop(cc);

    // A full disk is an ordinary error; the cluster lives on; growing makes room.
    let d = new_cluster(&cfg, &t, &id(0xd), "", 64).await;
    let dc = owner_client(&d, &d.owner).await.unwrap();
    dc.batch_execute("CREATE TABLE big (b text)").await.unwrap();
    let mut failure = None;
    for _ in 0..200 {
        if let Err(e) = dc
            .batch_execute(
                "INSERT INTO big SELECT repeat(md5(g::text), 64) FROM generate_series(1, 2000) g",
            )
            .await
        {
            failure = Some(e);
            break;
        }
    }
    let e = failure.expect("64 MiB fills up");
    let db_error = e
        .as_db_error()
        .unwrap_or_else(|| panic!("a PostgreSQL error, got {e:?}"));
    assert!(
        db_error.message().contains("No space left on device"),
        "{db_error:?}"
    );
    let one: i32 = dc
        .query_one("SELECT 1", &[])
        .await
        .expect("still serving")
        .get(0);
    assert_eq!(one, 1);
    let (used, total) = d.dirs.storage().usage().unwrap();
    assert!(used * 100 / total >= 95, "{used} of {total}");
    drop(dc);
    cluster::stop(&d.dirs, StopMode::Fast).await;
    d.dirs.storage().unmount().await.unwrap();
    d.dirs.storage().grow(128).await.expect("grow");
    d.dirs.storage().mount().await.unwrap();
    cluster::start(&cfg, &d.dirs, &RUN).await.unwrap();
    let (_, grown) = d.dirs.storage().usage().unwrap();
    assert!(grown > total + 50 * 1024 * 1024, "{total} -> {grown}");
    let dc = owner_client(&d, &d.owner).await.unwrap();
    dc.batch_execute("INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 100)")
        .await
        .expect("room after growing");
    drop(dc);

    // Nothing is left of removed clusters.
    drop(binding);
    for x in [&a, &b, &c, &d] {
        let pids_before = cluster::processes(&x.dirs);
        provision::destroy(&x.dirs).await.expect("destroy");
        assert!(
            cluster::processes(&x.dirs).is_empty(),
            "processes {pids_before:?} left"
        );
        assert!(!x.dirs.dir.exists());
        assert!(!x.dirs.socket_dir.exists());
        assert!(!storage::mounted_at(&x.dirs.storage().mountpoint));
        let _ = &x.superuser;
    }
    let loops = std::process::Command::new("losetup")
        .args(["-a"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains(&base.display().to_string()),
        "loop devices left: {}",
        String::from_utf8_lossy(&loops.stdout)
    );
}

#[test]
fn a_data_dir_the_postgres_user_cannot_search_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let base = std::env::temp_dir().join(format!("ps-pg-access-{}", std::process::id()));
    std::fs::create_dir_all(base.join("data")).unwrap();
    let mut cfg = config(&base.join("data"));
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(matches!(
        cfg.check_access(),
        Err(pandastack_postgres::PgError::NoAccess)
    ));
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).unwrap();
    assert!(cfg.check_access().is_ok());
    cfg.os_user = "no-such-user-here".into();
    assert!(matches!(
        cfg.check_access(),
        Err(pandastack_postgres::PgError::NotInstalled)
    ));
    std::fs::remove_dir_all(&base).unwrap();
}
