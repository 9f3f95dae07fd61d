//! The gVisor engine against real runsc: boot, the guest channel through the shim, checkpoint
//! with the instance left running, restore into a second instance, pause/resume, destroy
//! leaving nothing behind.
//!
//! Needs root, runsc, a baked rootfs and a built guest directory:
//! `PANDASTACK_TEST_ROOTFS` (e.g. `<data>/templates/base/<build>/rootfs`) and
//! `PANDASTACK_TEST_GUEST_DIR` (a directory with `pandastack-guest` and `kernel.py`), and the
//! shim command as `PANDASTACK_TEST_SHIM` (path of a built `pandastack` binary). scripts/test.sh
//! sets them. Without them the test prints `SKIPPED:` and returns, unless
//! `PANDASTACK_REQUIRE_SANDBOX_TESTS=1` (test.sh sets it), where that is a failure.

use pandastack_engine::{instance_id_from, Engine, Instance, InstanceStatus, SandboxSpec};
use pandastack_guest_protocol::{
    read_frame, write_frame, Frame, GuestMsg, HostMsg, OutputStream, PROTOCOL_VERSION,
};
use pandastack_gvisor::{GvisorConfig, GvisorEngine};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.exists())
}

/// Sends `msgs` over a fresh connection to the guest socket and returns every reply frame
/// (message and body) up to each request's final one.
fn call(socket: &Path, msgs: &[HostMsg]) -> Vec<(GuestMsg, Vec<u8>)> {
    // The shim binds the socket before it listens: a connect in between is refused, so retry
    // for a moment (the server's guest client does the same).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut s = loop {
        match UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("connect guest socket: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    for m in msgs {
        write_frame(&mut s, &Frame::new(m, Vec::new()).unwrap()).unwrap();
        loop {
            let f = read_frame(&mut s).expect("guest reply");
            let reply: GuestMsg = f.decode().unwrap();
            let last = reply.is_final();
            out.push((reply, f.body));
            if last {
                break;
            }
        }
    }
    out
}

/// Runs `cmd` in the guest; returns its stdout and exit code.
fn exec_stdout(socket: &Path, cmd: &str) -> (String, i32) {
    let hello = HostMsg::Hello {
        id: 1,
        version: PROTOCOL_VERSION,
    };
    let exec = HostMsg::Exec {
        id: 2,
        cmd: cmd.into(),
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(10_000),
    };
    let replies = call(socket, &[hello, exec]);
    assert!(
        matches!(replies[0].0, GuestMsg::HelloOk { .. }),
        "{replies:?}"
    );
    let mut stdout = String::new();
    let mut code = -1;
    for (msg, body) in &replies[1..] {
        match msg {
            GuestMsg::Output {
                stream: OutputStream::Stdout,
                ..
            } => stdout.push_str(&String::from_utf8_lossy(body)),
            GuestMsg::Output { .. } => {}
            GuestMsg::Exited { exit_code, .. } => code = *exit_code,
            other => panic!("unexpected {other:?}"),
        }
    }
    (stdout, code)
}

#[tokio::test(flavor = "multi_thread")]
async fn boot_checkpoint_restore_pause_destroy() {
    let (Some(rootfs), Some(guest_dir), Some(shim)) = (
        env_path("PANDASTACK_TEST_ROOTFS"),
        env_path("PANDASTACK_TEST_GUEST_DIR"),
        env_path("PANDASTACK_TEST_SHIM"),
    ) else {
        let why = "engine test needs PANDASTACK_TEST_ROOTFS, PANDASTACK_TEST_GUEST_DIR, PANDASTACK_TEST_SHIM";
        if std::env::var("PANDASTACK_REQUIRE_SANDBOX_TESTS").as_deref() == Ok("1") {
            panic!("{why}");
        }
        println!("SKIPPED: {why}");
        return;
    };
    let work = std::env::temp_dir().join(format!("pandastack-engine-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let engine = GvisorEngine::new(GvisorConfig {
        runsc: "runsc".into(),
        state_root: work.join("runsc"),
        platform: "ptrace".into(),
        shim_command: vec![shim.display().to_string(), "shim".into()],
        network: None,
        instances_dir: work.clone(),
        disks: None,
        // Beside `work`: collect_stale(work) must see only instance disks.
        mounts_dir: sibling(&work, "mounts"),
        volumes_dir: work.join("volumes"),
    })
    .unwrap();
    // Ids unique to this run: a killed earlier run may have left cgroups behind (frozen ones
    // would freeze a new container that reused their path).
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let spec = |n: u8| {
        let mut bytes = [n; 16];
        bytes[..12].copy_from_slice(&(nonce ^ u128::from(std::process::id())).to_be_bytes()[4..]);
        let id = instance_id_from(bytes);
        SandboxSpec {
            dir: work.join(&id),
            instance_id: id,
            rootfs: rootfs.clone(),
            guest_dir: guest_dir.clone(),
            cpu: 1,
            memory_mb: 256,
            hostname: "sandbox".into(),
            network: None,
            template_build: false,
            disk_mb: Some(256),
            volumes: Vec::new(),
        }
    };

    let a = spec(1);
    let inst = engine.boot(&a).await.expect("boot");
    let (out, code) = exec_stdout(
        &inst.guest_socket,
        "sh -c 'echo hello > /root/marker; cat /root/marker'",
    );
    assert_eq!((out.as_str(), code), ("hello\n", 0));
    let stats = engine.stats(&a.instance_id).await.unwrap();
    assert!(
        stats.memory_bytes > 0 && stats.cpu_ns > 0,
        "no cgroup readings: {stats:?}"
    );
    assert_eq!(
        engine.status(&a.instance_id).await.unwrap(),
        InstanceStatus::Running
    );

    let image = work.join("image");
    engine
        .checkpoint(&a.instance_id, &image, true)
        .await
        .expect("checkpoint");
    assert!(image.join("checkpoint.img").exists());
    // The original keeps running and keeps its channel.
    assert_eq!(
        exec_stdout(&inst.guest_socket, "cat /root/marker").0,
        "hello\n"
    );

    let b = spec(2);
    let restored = engine.restore(&b, &image).await.expect("restore");
    assert_eq!(
        exec_stdout(&restored.guest_socket, "cat /root/marker").0,
        "hello\n"
    );
    // The copy diverges without touching the original (private overlays).
    exec_stdout(&restored.guest_socket, "sh -c 'echo copy > /root/marker'");
    assert_eq!(
        exec_stdout(&inst.guest_socket, "cat /root/marker").0,
        "hello\n"
    );

    engine.pause(&a.instance_id).await.expect("pause");
    assert_eq!(
        engine.status(&a.instance_id).await.unwrap(),
        InstanceStatus::Paused
    );
    engine.resume(&a.instance_id).await.expect("resume");
    assert_eq!(exec_stdout(&inst.guest_socket, "echo back").0, "back\n");

    for s in [&a, &b] {
        engine
            .destroy(&s.instance_id, &s.dir)
            .await
            .expect("destroy");
        assert!(!s.dir.exists(), "instance dir left behind");
        assert_eq!(
            engine.status(&s.instance_id).await.unwrap(),
            InstanceStatus::Missing
        );
        assert!(
            !pandastack_gvisor::cgroup_exists(&s.instance_id),
            "cgroup left behind"
        );
    }
    assert!(engine.list().await.unwrap().is_empty());
    assert_no_disks_under(&work);
    engine.shutdown(false).await;
    assert_no_disks_under(&sibling(&work, "mounts"));
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(sibling(&work, "mounts"));
}

/// `<dir>-<what>`, next to `dir`.
fn sibling(dir: &std::path::Path, what: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}-{what}", dir.display()))
}

/// No mount and no loop device of an image under `dir` is left.
fn assert_no_disks_under(dir: &std::path::Path) {
    // Loop devices are detached asynchronously after their last unmount.
    for _ in 0..50 {
        let (mounts, loops) = pandastack_gvisor::disk::collect_stale(dir);
        if mounts.is_empty() && loops.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "disks left under {}: {:?}",
        dir.display(),
        pandastack_gvisor::disk::collect_stale(dir)
    );
}

/// Issue 8: what a sandbox writes (its root and /tmp) lands on its own size-limited disk. Past
/// the size the sandbox gets ENOSPC and keeps running, the host holds no more than the disk;
/// a restore gets its own disk with the data; destroying unmounts and detaches everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_bounds_what_a_sandbox_writes() {
    let Some((rootfs, guest_dir, shim)) = prerequisites() else {
        return;
    };
    let work = std::env::temp_dir().join(format!("pandastack-disk-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let engine = GvisorEngine::new(GvisorConfig {
        runsc: "runsc".into(),
        state_root: work.join("runsc"),
        platform: "ptrace".into(),
        shim_command: vec![shim.display().to_string(), "shim".into()],
        network: None,
        instances_dir: work.clone(),
        disks: Some(pandastack_gvisor::DiskConfig {
            spares_dir: work.join("disks"),
            spare_mb: 128,
            stock: 1,
        }),
        mounts_dir: sibling(&work, "mounts"),
        volumes_dir: work.join("volumes"),
    })
    .unwrap();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let spec = |n: u8| {
        let mut bytes = [n; 16];
        bytes[..12].copy_from_slice(&(nonce ^ u128::from(std::process::id())).to_be_bytes()[4..]);
        let id = instance_id_from(bytes);
        SandboxSpec {
            dir: work.join(&id),
            instance_id: id,
            rootfs: rootfs.clone(),
            guest_dir: guest_dir.clone(),
            cpu: 1,
            memory_mb: 256,
            hostname: "sandbox".into(),
            network: None,
            template_build: false,
            disk_mb: Some(128),
            volumes: Vec::new(),
        }
    };
    let a = spec(1);
    let inst = engine.boot(&a).await.expect("boot");
    let (out, code) = exec_stdout(
        &inst.guest_socket,
        "sh -c 'echo kept > /tmp/t; dd if=/dev/zero of=/root/fill bs=1M count=300 2>&1; cat /tmp/t'",
    );
    assert!(out.contains("No space left on device"), "{out}");
    assert!(out.ends_with("kept\n"), "{out}");
    assert_eq!(code, 0);
    let (used, total) = engine.disk_usage(&a.dir).expect("disk usage");
    assert!(
        total <= 130 << 20 && used > 100 << 20,
        "used {used} of {total}"
    );
    // The host holds what the disk holds, not the 300 MB asked for.
    let host_bytes = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(a.dir.join("disk.img")).unwrap().blocks() * 512
    };
    assert!(
        host_bytes <= 140 << 20,
        "the image holds {host_bytes} bytes"
    );
    // Freeing space works, and the sandbox goes on.
    assert_eq!(
        exec_stdout(&inst.guest_socket, "sh -c 'rm /root/fill; echo freed'").0,
        "freed\n"
    );
    exec_stdout(
        &inst.guest_socket,
        "sh -c 'head -c 50000000 /dev/urandom > /root/data; md5sum /root/data > /tmp/sum'",
    );
    let image = work.join("image");
    engine
        .checkpoint(&a.instance_id, &image, true)
        .await
        .expect("checkpoint");
    let b = spec(2);
    let restored = engine.restore(&b, &image).await.expect("restore");
    assert_eq!(
        exec_stdout(&restored.guest_socket, "sh -c 'md5sum -c /tmp/sum'").0,
        "/root/data: OK\n"
    );
    let (used_b, _) = engine.disk_usage(&b.dir).expect("restored disk usage");
    assert!(
        used_b > 45 << 20,
        "the copy is on the restored disk: {used_b}"
    );
    for s in [&a, &b] {
        engine
            .destroy(&s.instance_id, &s.dir)
            .await
            .expect("destroy");
        assert!(!s.dir.exists(), "instance dir left behind");
    }
    assert_no_disks_under(&work);
    // A loop device a crash left attached (no mount) is detached by start-up recovery.
    let stray = work.join("ps-stray").join("disk.img");
    std::fs::create_dir_all(stray.parent().unwrap()).unwrap();
    pandastack_gvisor::disk::format(&stray, 64, pandastack_gvisor::disk::Kind::Scratch)
        .expect("format");
    let attached = std::process::Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&stray)
        .output()
        .unwrap();
    assert!(attached.status.success(), "losetup: {attached:?}");
    assert_eq!(pandastack_gvisor::disk::collect_stale(&work).1.len(), 1);
    engine.recover(&[]).await.expect("recovery");
    assert_no_disks_under(&work);
    engine.shutdown(false).await;
    assert_no_disks_under(&sibling(&work, "mounts"));
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(sibling(&work, "mounts"));
}

/// Waits until `done` holds, checking every 50 ms; fails the test naming `what` after `secs`.
async fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Restores `image` as `spec` and checks that the restore landed on a container made in
/// advance (an instance id other than the spec's); `what` names the restore in the failure.
async fn restore_onto_target(
    engine: &GvisorEngine,
    spec: &SandboxSpec,
    image: &Path,
    what: &str,
) -> Instance {
    let restored = engine
        .restore(spec, image)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_ne!(
        restored.instance_id, spec.instance_id,
        "{what} did not land on a target"
    );
    restored
}

/// The files of the test's prerequisites, or `None` (after a `SKIPPED:` line) when they are
/// missing outside scripts/test.sh.
fn prerequisites() -> Option<(PathBuf, PathBuf, PathBuf)> {
    match (
        env_path("PANDASTACK_TEST_ROOTFS"),
        env_path("PANDASTACK_TEST_GUEST_DIR"),
        env_path("PANDASTACK_TEST_SHIM"),
    ) {
        (Some(r), Some(g), Some(s)) => Some((r, g, s)),
        _ => {
            let why = "engine test needs PANDASTACK_TEST_ROOTFS, PANDASTACK_TEST_GUEST_DIR, PANDASTACK_TEST_SHIM";
            if std::env::var("PANDASTACK_REQUIRE_SANDBOX_TESTS").as_deref() == Ok("1") {
                panic!("{why}");
            }
            println!("SKIPPED: {why}");
            None
        }
    }
}

/// Names under `dir` that start with `prefix`.
fn names_with(dir: &str, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// One HTTP/1.0 GET from the host to `ip:port`; the status line, or the connect error.
fn http_get(ip: std::net::Ipv4Addr, port: u16) -> Result<String, String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from((ip, port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out.lines().next().unwrap_or_default().to_string())
}

/// Networked instances: each one's listener is reachable from the host at its own
/// `guest_ip` (also after a checkpoint is restored into a new namespace), instances cannot
/// reach each other whatever a policy's `allow_out` names, and destroying them
/// leaves no namespace, link or policy chain behind.
#[tokio::test(flavor = "multi_thread")]
async fn networked_instances_get_their_own_address_and_policy() {
    let Some((rootfs, guest_dir, shim)) = prerequisites() else {
        return;
    };
    let work = std::env::temp_dir().join(format!("pandastack-net-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let tag = format!("{:06x}", std::process::id() % 0xff_ffff);
    let engine = GvisorEngine::new(GvisorConfig {
        runsc: "runsc".into(),
        state_root: work.join("runsc"),
        platform: "ptrace".into(),
        shim_command: vec![shim.display().to_string(), "shim".into()],
        network: Some(pandastack_gvisor::net::NetConfig {
            data_dir: work.clone(),
            tag: tag.clone(),
            stock: 1,
            ..Default::default()
        }),
        instances_dir: work.clone(),
        disks: None,
        // Beside `work`: collect_stale(work) must see only instance disks.
        mounts_dir: sibling(&work, "mounts"),
        volumes_dir: work.join("volumes"),
    })
    .unwrap();
    engine.recover(&[]).await.expect("network recovery");
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let spec = |n: u8| {
        let mut bytes = [n; 16];
        bytes[..12].copy_from_slice(&(nonce ^ u128::from(std::process::id())).to_be_bytes()[4..]);
        let id = instance_id_from(bytes);
        SandboxSpec {
            dir: work.join(&id),
            instance_id: id,
            rootfs: rootfs.clone(),
            guest_dir: guest_dir.clone(),
            cpu: 1,
            memory_mb: 256,
            hostname: "sandbox".into(),
            network: Some(pandastack_engine::NetworkPolicy::open()),
            template_build: false,
            disk_mb: Some(256),
            volumes: Vec::new(),
        }
    };

    let a = spec(1);
    let inst = engine.boot(&a).await.expect("networked boot");
    let ip_a = inst.network.expect("guest_ip").guest_ip;
    let (addr, _) = exec_stdout(&inst.guest_socket, "cat /proc/net/route");
    assert!(addr.contains("eth0"), "no eth0 route inside: {addr}");
    exec_stdout(
        &inst.guest_socket,
        "sh -c 'cd / && setsid python3 -m http.server 8000 >/dev/null 2>&1 < /dev/null &'",
    );
    let mut status = Err(String::new());
    for _ in 0..50 {
        status = http_get(ip_a, 8000);
        if status.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        status.as_deref().unwrap_or_default().contains("200"),
        "{status:?}"
    );

    let image = work.join("image");
    engine
        .checkpoint(&a.instance_id, &image, true)
        .await
        .expect("checkpoint");
    let b = spec(2);
    let restored = engine.restore(&b, &image).await.expect("networked restore");
    let ip_b = restored.network.expect("guest_ip").guest_ip;
    assert_ne!(ip_a, ip_b, "two instances share an address");
    assert!(
        http_get(ip_b, 8000).unwrap_or_default().contains("200"),
        "restored listener"
    );
    assert!(
        http_get(ip_a, 8000).unwrap_or_default().contains("200"),
        "original listener"
    );

    // b cannot reach a (another sandbox), not even when its policy names a's address and
    // port (issue 23 finding 1: no tenant's `accept` opens another sandbox).
    let probe = format!("curl -s -m 3 -o /dev/null -w %{{http_code}} http://{ip_a}:8000/");
    let (code, _) = exec_stdout(&restored.guest_socket, &probe);
    assert_eq!(code, "000", "another sandbox was reachable: {code}");
    let named = pandastack_engine::NetworkPolicy {
        internet: false,
        allow_out: vec![format!("{ip_a}:8000").parse().unwrap()],
        deny_out: vec![],
    };
    engine
        .set_network_policy(&b.instance_id, &named)
        .await
        .expect("set policy");
    let (code, _) = exec_stdout(&restored.guest_socket, &probe);
    assert_eq!(code, "000", "allow_out opened another sandbox: {code}");

    for s in [&a, &b] {
        engine
            .destroy(&s.instance_id, &s.dir)
            .await
            .expect("destroy");
    }
    let nets = engine.networks().unwrap().clone();
    nets.drain_stock().await;
    assert_eq!(
        names_with("/run/netns", &format!("ps-{tag}-")),
        Vec::<String>::new()
    );
    assert_eq!(
        names_with("/sys/class/net", &format!("ps{tag}-")),
        Vec::<String>::new()
    );
    let table = std::process::Command::new("nft")
        .args(["list", "table", "inet", &format!("pandastack_{tag}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        !text.contains("chain slot_"),
        "policy chains left behind: {text}"
    );
    engine.shutdown(false).await;
    let _ = std::process::Command::new("nft")
        .args(["delete", "table", "inet", &format!("pandastack_{tag}")])
        .status();
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(sibling(&work, "mounts"));
}

/// Restore targets: a container made in advance takes a restore (under the policy of the
/// restore's spec, not the target's), reports its own instance id and directory, and a
/// shutdown destroys the targets not used.
#[tokio::test(flavor = "multi_thread")]
async fn restores_land_on_containers_made_in_advance() {
    let Some((rootfs, guest_dir, shim)) = prerequisites() else {
        return;
    };
    let work = std::env::temp_dir().join(format!("pandastack-target-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let tag = format!("{:06x}", (std::process::id() + 7) % 0xff_ffff);
    let engine = GvisorEngine::new(GvisorConfig {
        runsc: "runsc".into(),
        state_root: work.join("runsc"),
        platform: "ptrace".into(),
        shim_command: vec![shim.display().to_string(), "shim".into()],
        network: Some(pandastack_gvisor::net::NetConfig {
            data_dir: work.clone(),
            tag: tag.clone(),
            ..Default::default()
        }),
        instances_dir: work.join("instances"),
        disks: None,
        mounts_dir: work.join("mounts"),
        volumes_dir: work.join("volumes"),
    })
    .unwrap();
    engine.recover(&[]).await.expect("network recovery");
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let spec = |n: u8, policy: pandastack_engine::NetworkPolicy| {
        let mut bytes = [n; 16];
        bytes[..12].copy_from_slice(&(nonce ^ u128::from(std::process::id())).to_be_bytes()[4..]);
        let id = instance_id_from(bytes);
        SandboxSpec {
            dir: work.join(&id),
            instance_id: id,
            rootfs: rootfs.clone(),
            guest_dir: guest_dir.clone(),
            cpu: 1,
            memory_mb: 256,
            hostname: "sandbox".into(),
            network: Some(policy),
            template_build: false,
            disk_mb: Some(256),
            volumes: Vec::new(),
        }
    };
    let open = pandastack_engine::NetworkPolicy::open();
    let a = spec(1, open.clone());
    let inst = engine.boot(&a).await.expect("boot");
    exec_stdout(
        &inst.guest_socket,
        "sh -c 'echo made-before > /root/marker'",
    );
    let image = work.join("image");
    engine
        .checkpoint(&a.instance_id, &image, true)
        .await
        .expect("checkpoint");

    engine.keep_targets(pandastack_engine::TargetClass::of(&a), 1, 1);
    wait_for("a restore target to be made", 60, || {
        engine.targets_ready() >= 1
    })
    .await;
    let closed = pandastack_engine::NetworkPolicy {
        internet: false,
        allow_out: vec![],
        deny_out: vec![],
    };
    let b = spec(2, closed.clone());
    let restored = restore_onto_target(&engine, &b, &image, "the restore").await;
    assert!(
        restored.dir.starts_with(work.join("instances")),
        "{:?}",
        restored.dir
    );
    assert_eq!(
        exec_stdout(&restored.guest_socket, "cat /root/marker").0,
        "made-before\n"
    );
    let net: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(restored.dir.join("net.json")).unwrap())
            .unwrap();
    assert_eq!(
        net["policy"]["internet"], false,
        "the restore's policy was not applied: {net}"
    );

    // A fork tree's targets (make_targets): none are kept now, so a tree of 3 lacks 3, more
    // than the 2 it may make (none made); a tree of 2 gets both, and its restores land on them.
    let class = pandastack_engine::TargetClass::of(&a);
    wait_for("the refill to finish", 60, || {
        engine.targets_held() == engine.targets_ready()
    })
    .await;
    engine.keep_targets(class.clone(), 0, 0);
    assert_eq!(engine.targets_ready(), 0);
    engine.make_targets(class.clone(), 3, 2).await;
    assert_eq!(engine.targets_ready(), 0, "a tree lacking 3 made some");
    engine.make_targets(class.clone(), 2, 2).await;
    assert_eq!(
        engine.targets_ready(),
        2,
        "a tree lacking 2 did not get them"
    );
    let mut children = Vec::new();
    for n in [3, 4] {
        let child = spec(n, open.clone());
        children.push(restore_onto_target(&engine, &child, &image, "a child's restore").await);
    }
    assert_eq!(engine.targets_ready(), 0);

    // Demand (issue 11): the two children just asked for targets of this class, so with room
    // for 3 the stock grows past its least of 0; a trim keeps a recent burst, a lower most
    // gives the surplus back.
    engine.keep_targets(class.clone(), 0, 3);
    wait_for("the stock to follow the burst", 60, || {
        engine.targets_ready() >= 2 && engine.targets_held() == engine.targets_ready()
    })
    .await;
    engine.trim_targets();
    assert!(engine.targets_ready() >= 2, "a recent burst was trimmed");
    engine.keep_targets(class.clone(), 0, 1);
    assert_eq!(engine.targets_ready(), 1, "a lower most kept its surplus");
    for (id, dir) in [
        (&a.instance_id, &a.dir),
        (&restored.instance_id, &restored.dir),
    ]
    .into_iter()
    .chain(children.iter().map(|c| (&c.instance_id, &c.dir)))
    {
        engine.destroy(id, dir).await.expect("destroy");
    }
    engine.keep_targets(pandastack_engine::TargetClass::of(&a), 1, 1);
    engine.shutdown(false).await;
    assert_eq!(engine.targets_held(), 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !engine.list().await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "containers left: {:?}",
            engine.list().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        names_with("/run/netns", &format!("ps-{tag}-")),
        Vec::<String>::new()
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Mount points under `root` in this process's mount namespace, and loop devices whose image
/// lies under `root`.
fn mounts_and_loops_under(root: &Path) -> (Vec<String>, Vec<String>) {
    let root = root.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&root))
        .map(String::from)
        .collect();
    let loops = std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|d| std::fs::read_to_string(d.path().join("loop/backing_file")).ok())
        .filter(|b| b.starts_with(&root))
        .collect();
    (mounts, loops)
}

/// Mount points seen by the runsc process of the shim started with `--volume-staging staging`.
fn namespace_mounts_of(staging: &Path) -> Vec<String> {
    let pids = std::process::Command::new("pgrep")
        .arg("-f")
        .arg(format!("volume-staging {}", staging.display()))
        .output()
        .unwrap();
    let shim = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .next()
        .map(String::from)
        .expect("the shim of the instance");
    let kids = std::process::Command::new("pgrep")
        .args(["-P", &shim])
        .output()
        .unwrap();
    let runsc = String::from_utf8_lossy(&kids.stdout)
        .split_whitespace()
        .next()
        .map(String::from)
        .expect("the shim's runsc");
    std::fs::read_to_string(format!("/proc/{runsc}/mountinfo"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(String::from))
        .collect()
}

/// Volumes (issue 9): attached at boot and to a running instance, at `/mnt/{name}` with their
/// size; read-only ones refuse writes, `/mnt` itself too; an image held read-write is refused
/// to a second instance; a checkpoint holding a file open on a volume restores onto a target
/// (made before the volume was known) with the volume; a restarted engine
/// rebuilds what a live instance holds; releasing and destroying leave no mount or loop device.
#[tokio::test(flavor = "multi_thread")]
async fn volumes_follow_instances_through_attach_restore_and_restart() {
    let Some((rootfs, guest_dir, shim)) = prerequisites() else {
        return;
    };
    let work = std::env::temp_dir().join(format!("pandastack-vol-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("instances")).unwrap();
    let tag = format!("{:06x}", (std::process::id() + 13) % 0xff_ffff);
    let cfg = GvisorConfig {
        runsc: "runsc".into(),
        state_root: work.join("runsc"),
        platform: "ptrace".into(),
        shim_command: vec![shim.display().to_string(), "shim".into()],
        network: Some(pandastack_gvisor::net::NetConfig {
            data_dir: work.clone(),
            tag: tag.clone(),
            ..Default::default()
        }),
        instances_dir: work.join("instances"),
        disks: None,
        mounts_dir: work.join("mounts"),
        volumes_dir: work.join("volumes"),
    };
    let engine = GvisorEngine::new(cfg.clone()).unwrap();
    engine.recover(&[]).await.expect("recovery");
    let images = work.join("volumes");
    std::fs::create_dir_all(&images).unwrap();
    let vol = |name: &str, read_only: bool| pandastack_engine::VolumeMount {
        name: name.into(),
        image: images.join(format!("vol-{name}.ext4")),
        read_only,
    };
    engine
        .format_volume(&vol("a", false).image, 256)
        .await
        .unwrap();
    engine
        .format_volume(&vol("b", false).image, 64)
        .await
        .unwrap();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let spec = |n: u8, volumes: Vec<pandastack_engine::VolumeMount>| {
        let mut bytes = [n; 16];
        bytes[..12].copy_from_slice(&(nonce ^ u128::from(std::process::id())).to_be_bytes()[4..]);
        let id = instance_id_from(bytes);
        SandboxSpec {
            dir: work.join("instances").join(&id),
            instance_id: id,
            rootfs: rootfs.clone(),
            guest_dir: guest_dir.clone(),
            cpu: 1,
            memory_mb: 256,
            hostname: "sandbox".into(),
            network: Some(pandastack_engine::NetworkPolicy::open()),
            template_build: false,
            // The disk layout too: its shim drops other instances' disks from its mount
            // namespace and must keep the volumes.
            disk_mb: Some(128),
            volumes,
        }
    };

    let a = spec(1, vec![vol("a", false)]);
    let inst = engine.boot(&a).await.expect("boot with a volume");
    let (out, code) = exec_stdout(
        &inst.guest_socket,
        "sh -c 'echo kept > /mnt/a/note && sync && df -k /mnt/a | tail -1'",
    );
    assert_eq!(code, 0, "{out}");
    let size_kb: u64 = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!((200_000..=262_144).contains(&size_kb), "df: {out}");
    let (out, code) = exec_stdout(&inst.guest_socket, "sh -c 'touch /mnt/stray 2>&1'");
    assert!(code != 0 && out.contains("Read-only"), "{code} {out}");

    // Attached to the running instance (a warm-pool claim), read-only.
    engine
        .attach_volumes(&a.instance_id, &a.dir, &[vol("b", true)])
        .await
        .expect("attach to a running instance");
    let (out, _) = exec_stdout(&inst.guest_socket, "sh -c 'ls /mnt/b; touch /mnt/b/x 2>&1'");
    assert!(
        out.contains("lost+found") && out.contains("Read-only"),
        "{out}"
    );
    let refused = engine
        .attach_volumes(&a.instance_id, &a.dir, &[vol("b", true)])
        .await;
    assert!(refused.is_err(), "a volume attached twice");

    // A process keeps a file open on the volume across the checkpoint.
    exec_stdout(
        &inst.guest_socket,
        "sh -c 'setsid sh -c \"exec 3>>/mnt/a/held; exec sleep 600\" </dev/null >/dev/null 2>&1 &'",
    );
    let image = work.join("image");
    engine
        .checkpoint(&a.instance_id, &image, true)
        .await
        .expect("checkpoint");
    let busy = engine.boot(&spec(9, vec![vol("a", false)])).await;
    assert!(busy.is_err(), "a volume held read-write was attached twice");

    engine.keep_targets(pandastack_engine::TargetClass::of(&a), 1, 1);
    wait_for("a restore target to be made", 60, || {
        engine.targets_ready() >= 1
    })
    .await;
    engine
        .release_volumes(&a.instance_id, &a.dir)
        .await
        .expect("release");
    let (_, loops) = mounts_and_loops_under(&images);
    assert!(loops.is_empty(), "images still attached: {loops:?}");
    let (mounts, _) = mounts_and_loops_under(&work.join("mounts/volume"));
    assert!(mounts.is_empty(), "volumes still mounted: {mounts:?}");

    let b = spec(2, vec![vol("a", false), vol("b", true)]);
    let restored = engine
        .restore(&b, &image)
        .await
        .expect("restore with volumes");
    assert_ne!(
        restored.instance_id, b.instance_id,
        "the target was not used"
    );
    let (out, _) = exec_stdout(
        &restored.guest_socket,
        "sh -c 'cat /mnt/a/note; ls -l /proc/*/fd 2>/dev/null | grep -c /mnt/a/held'",
    );
    assert_eq!(out, "kept\n1\n");
    // The restored instance's runsc sees its own staging directory (with its volumes) and no
    // other instance's, though `a`'s existed when its namespace was made.
    let seen = namespace_mounts_of(&work.join("mounts/sandbox").join(&restored.instance_id));
    let own = format!("mounts/sandbox/{}", restored.instance_id);
    assert!(
        seen.iter().any(|m| m.ends_with(&format!("{own}/a"))),
        "its volume is missing: {seen:?}"
    );
    let ours = format!("{}/", work.join("mounts").display());
    let foreign: Vec<&String> = seen
        .iter()
        .filter(|m| m.starts_with(&ours) && !m.contains(&own))
        .collect();
    assert!(
        foreign.is_empty(),
        "other instances' volume mounts in its namespace: {foreign:?}"
    );

    // A restarted engine rebuilds the state of the instance that lives on, and unmounts the
    // staging directory of one that does not.
    let dead = work
        .join("mounts/sandbox")
        .join(spec(4, vec![]).instance_id);
    std::fs::create_dir_all(&dead).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&dead)
        .status()
        .unwrap();
    assert!(mounted.success());
    // And a loop device a crash left on a volume image between `losetup` and `mount`.
    engine
        .format_volume(&vol("c", false).image, 64)
        .await
        .unwrap();
    let looped = std::process::Command::new("losetup")
        .args(["-f", "--show"])
        .arg(vol("c", false).image)
        .output()
        .unwrap();
    assert!(looped.status.success(), "losetup: {looped:?}");
    let restarted = GvisorEngine::new(cfg).unwrap();
    restarted
        .recover(&[(restored.instance_id.clone(), restored.dir.clone())])
        .await
        .expect("recovery after restart");
    assert!(
        !dead.exists(),
        "a dead instance's staging directory was left"
    );
    let stray = String::from_utf8_lossy(&looped.stdout).trim().to_string();
    let backing = format!(
        "/sys/block/{}/loop/backing_file",
        stray.trim_start_matches("/dev/")
    );
    assert!(
        !std::path::Path::new(&backing).exists(),
        "the stray loop device of a volume image was left: {stray}"
    );
    let (out, code) = exec_stdout(
        &restored.guest_socket,
        "sh -c 'echo more >> /mnt/a/note; sync; cat /mnt/a/note'",
    );
    assert_eq!((out.as_str(), code), ("kept\nmore\n", 0));
    for (id, dir) in [
        (&a.instance_id, &a.dir),
        (&restored.instance_id, &restored.dir),
    ] {
        restarted.destroy(id, dir).await.expect("destroy");
    }
    // The volumes are closed (the first engine's refilled restore target, with a disk and a
    // staging directory of its own, goes at its shutdown below).
    let (_, loops) = mounts_and_loops_under(&images);
    assert!(loops.is_empty(), "volume images still attached: {loops:?}");
    let (mounts, _) = mounts_and_loops_under(&work.join("mounts/volume"));
    assert!(mounts.is_empty(), "volumes still mounted: {mounts:?}");
    engine.shutdown(false).await;
    restarted.shutdown(false).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !engine.list().await.unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "containers left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(mounts_and_loops_under(&work), (vec![], vec![]));
    // The volume outlived every instance, with what they wrote.
    let check = std::process::Command::new("e2fsck")
        .args(["-f", "-n"])
        .arg(vol("a", false).image)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let _ = std::process::Command::new("nft")
        .args(["delete", "table", "inet", &format!("pandastack_{tag}")])
        .status();
    let _ = std::fs::remove_dir_all(&work);
}
