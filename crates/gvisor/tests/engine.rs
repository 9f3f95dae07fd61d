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

use pandastack_engine::{instance_id_from, Engine, InstanceStatus, SandboxSpec};
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
    let mut s = UnixStream::connect(socket).expect("connect guest socket");
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
    let _ = std::fs::remove_dir_all(&work);
}
