//! End-to-end: file read/write/list/stat/remove/mkdir through the real guest binary.

mod common;

use common::Guest;
use pandastack_guest_protocol::{ErrorCode, GuestMsg, HostMsg};
use std::path::PathBuf;
use std::time::Duration;

const MIB: usize = 1024 * 1024;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pg-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn write(g: &Guest, path: &str, data: &[u8]) -> Vec<common::Reply> {
    let id = g.id();
    g.send(
        &HostMsg::FileWrite {
            id,
            path: path.into(),
        },
        vec![],
    );
    for chunk in data.chunks(1024 * 1024) {
        g.send(&HostMsg::FileChunk { id }, chunk.to_vec());
    }
    g.send(&HostMsg::FileEnd { id }, vec![]);
    g.wait(id, Duration::from_secs(60))
}

fn read(g: &Guest, path: &str) -> Result<Vec<u8>, (ErrorCode, String)> {
    let id = g.id();
    let mut data = Vec::new();
    for (msg, body) in g.call(HostMsg::FileRead {
        id,
        path: path.into(),
        window: None,
    }) {
        match msg {
            GuestMsg::FileChunk { .. } => {
                assert!(body.len() <= 1024 * 1024);
                data.extend(body)
            }
            GuestMsg::FileEnd { .. } => return Ok(data),
            GuestMsg::Error { code, message, .. } => return Err((code, message)),
            other => panic!("unexpected {other:?}"),
        }
    }
    unreachable!()
}

fn error_code(replies: &[common::Reply]) -> Option<ErrorCode> {
    match replies.last() {
        Some((GuestMsg::Error { code, .. }, _)) => Some(*code),
        _ => None,
    }
}

#[test]
fn round_trip_including_50_mb() {
    let g = Guest::start();
    let dir = scratch("rt");
    let small = dir.join("a/b/small.bin");
    let r = write(&g, small.to_str().unwrap(), b"\x00\xffhello");
    assert_eq!(
        r[0].0,
        GuestMsg::FileWritten {
            id: r[0].0.id(),
            bytes: 7
        }
    );
    assert_eq!(read(&g, small.to_str().unwrap()).unwrap(), b"\x00\xffhello");

    let big: Vec<u8> = (0..50 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let path = dir.join("big.bin");
    let r = write(&g, path.to_str().unwrap(), &big);
    assert!(matches!(r[0].0, GuestMsg::FileWritten { bytes, .. } if bytes == big.len() as u64));
    assert!(read(&g, path.to_str().unwrap()).unwrap() == big);

    let empty = dir.join("empty");
    write(&g, empty.to_str().unwrap(), b"");
    assert_eq!(read(&g, empty.to_str().unwrap()).unwrap(), b"");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn abort_leaves_no_trace() {
    let g = Guest::start();
    let dir = scratch("abort");
    let path = dir.join("f");
    let id = g.id();
    g.send(
        &HostMsg::FileWrite {
            id,
            path: path.to_str().unwrap().into(),
        },
        vec![],
    );
    g.send(&HostMsg::FileChunk { id }, b"partial".to_vec());
    let r = g.call(HostMsg::FileAbort { id });
    assert_eq!(r[0].0, GuestMsg::Done { id });
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn path_errors() {
    let g = Guest::start();
    let dir = scratch("errs");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let (code, msg) = read(&g, d).unwrap_err();
    assert_eq!(code, ErrorCode::Invalid);
    assert!(msg.contains("is a directory"), "{msg}");
    assert_eq!(
        read(&g, &format!("{d}/missing")).unwrap_err().0,
        ErrorCode::NotFound
    );
    assert_eq!(read(&g, "relative/path").unwrap_err().0, ErrorCode::Invalid);
    assert_eq!(
        error_code(&write(&g, "rel", b"x")),
        Some(ErrorCode::Invalid)
    );
    assert_eq!(error_code(&write(&g, d, b"x")), Some(ErrorCode::Invalid));
    let id = g.id();
    assert_eq!(
        error_code(&g.call(HostMsg::Stat {
            id,
            path: format!("{d}/nope")
        })),
        Some(ErrorCode::NotFound)
    );
    let id = g.id();
    assert_eq!(
        error_code(&g.call(HostMsg::ListDir {
            id,
            path: "x".into()
        })),
        Some(ErrorCode::Invalid)
    );
    let id = g.id();
    assert_eq!(
        error_code(&g.call(HostMsg::Remove {
            id,
            path: format!("{d}/nope")
        })),
        Some(ErrorCode::NotFound)
    );
    let id = g.id();
    assert_eq!(
        error_code(&g.call(HostMsg::FileEnd { id })),
        Some(ErrorCode::NotFound)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn list_stat_remove_mkdir() {
    let g = Guest::start();
    let dir = scratch("ls");
    let d = dir.to_str().unwrap().to_string();
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::MakeDir {
            id,
            path: format!("{d}/sub/deeper")
        })[0]
            .0,
        GuestMsg::Done { id }
    );
    write(&g, &format!("{d}/b.txt"), b"12345");
    write(&g, &format!("{d}/sub/deeper/x"), b"x");
    std::os::unix::fs::symlink("b.txt", dir.join("a-link")).unwrap();

    let id = g.id();
    let entries = match &g.call(HostMsg::ListDir {
        id,
        path: d.clone(),
    })[0]
        .0
    {
        GuestMsg::DirList { entries, .. } => entries.clone(),
        other => panic!("{other:?}"),
    };
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a-link", "b.txt", "sub"]);
    assert!(entries[0].is_symlink && !entries[0].is_dir);
    assert_eq!(
        (entries[1].size, entries[1].path.clone()),
        (5, format!("{d}/b.txt"))
    );
    assert_eq!(entries[1].mode & 0o170000, 0o100000);
    assert!(entries[1].mtime > 1_600_000_000);
    assert!(entries[2].is_dir);

    let id = g.id();
    match &g.call(HostMsg::Stat {
        id,
        path: format!("{d}/a-link"),
    })[0]
        .0
    {
        GuestMsg::Stat { entry, .. } => assert!(entry.is_symlink && entry.name == "a-link"),
        other => panic!("{other:?}"),
    }
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::Remove {
            id,
            path: format!("{d}/sub")
        })[0]
            .0,
        GuestMsg::Done { id }
    );
    assert!(!dir.join("sub").exists());
    let id = g.id();
    assert_eq!(
        g.call(HostMsg::Remove {
            id,
            path: format!("{d}/a-link")
        })[0]
            .0,
        GuestMsg::Done { id }
    );
    assert!(dir.join("b.txt").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_windowed_read_waits_for_acks_and_stops_when_aborted() {
    let g = Guest::start();
    let dir = scratch("window");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("five.bin");
    let data: Vec<u8> = (0..5 * MIB + 1).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let path = file.to_string_lossy().to_string();

    let id = g.id();
    g.send(
        &HostMsg::FileRead {
            id,
            path: path.clone(),
            window: Some(2),
        },
        Vec::new(),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        g.received(id),
        2,
        "more chunks than the window before any ack"
    );
    // Six chunks in all (five full, one of a single byte), then FileEnd.
    for _ in 0..4 {
        g.send(&HostMsg::FileReadAck { id }, Vec::new());
    }
    let mut got = Vec::new();
    for (msg, body) in g.wait(id, Duration::from_secs(10)) {
        match msg {
            GuestMsg::FileChunk { .. } => got.extend(body),
            GuestMsg::FileEnd { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, data);

    let id = g.id();
    g.send(
        &HostMsg::FileRead {
            id,
            path,
            window: Some(1),
        },
        Vec::new(),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(g.received(id), 1);
    g.send(&HostMsg::FileAbort { id }, Vec::new());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(g.received(id), 1, "an aborted read kept sending");
    // The guest still answers other requests.
    let ping = g.id();
    assert!(matches!(
        g.call(HostMsg::Ping {
            id: ping,
            memory_lease_ms: None,
        })
        .last()
        .unwrap()
        .0,
        GuestMsg::Pong { .. }
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
