//! Freezes the JSON shape of protocol v1. A failure here means the wire changed: bump
//! `PROTOCOL_VERSION` and add the new shapes beside these, do not edit them.

use pandastack_guest_protocol::*;
use std::collections::BTreeMap;

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

#[test]
fn v1_host_messages_are_frozen() {
    assert_eq!(PROTOCOL_VERSION, 1);
    assert_eq!(
        json(&HostMsg::Hello { id: 1, version: 1 }),
        r#"{"type":"hello","id":1,"version":1}"#
    );
    let exec = HostMsg::Exec {
        id: 2,
        cmd: "echo hi".into(),
        env: BTreeMap::from([("A".to_string(), "b".to_string())]),
        cwd: None,
        timeout_ms: Some(5),
    };
    assert_eq!(
        json(&exec),
        r#"{"type":"exec","id":2,"cmd":"echo hi","env":{"A":"b"},"cwd":null,"timeout_ms":5}"#
    );
    assert_eq!(
        json(&HostMsg::KernelRun {
            id: 3,
            kernel_id: "k".into(),
            code: "1".into(),
            timeout_ms: None
        }),
        r#"{"type":"kernel_run","id":3,"kernel_id":"k","code":"1","timeout_ms":null}"#
    );
    assert_eq!(
        json(&HostMsg::FileWrite {
            id: 4,
            path: "/a".into()
        }),
        r#"{"type":"file_write","id":4,"path":"/a"}"#
    );
}

#[test]
fn v1_guest_messages_are_frozen() {
    assert_eq!(
        json(&GuestMsg::Exited {
            id: 2,
            exit_code: 7,
            timed_out: false,
            duration_ms: 3
        }),
        r#"{"type":"exited","id":2,"exit_code":7,"timed_out":false,"duration_ms":3}"#
    );
    assert_eq!(
        json(&GuestMsg::Output {
            id: 2,
            stream: OutputStream::Stderr
        }),
        r#"{"type":"output","id":2,"stream":"stderr"}"#
    );
    assert_eq!(
        json(&GuestMsg::Error {
            id: 9,
            code: ErrorCode::NotFound,
            message: "x".into()
        }),
        r#"{"type":"error","id":9,"code":"not_found","message":"x"}"#
    );
    let ex = Execution {
        exit_code: 0,
        ..Default::default()
    };
    assert_eq!(
        json(&ex),
        r#"{"results":[],"stdout":"","stderr":"","error":null,"exit_code":0,"duration_ms":0,"timed_out":false}"#
    );
    // Defaults let a v1 host omit optional fields.
    let m: HostMsg = serde_json::from_str(r#"{"type":"exec","id":1,"cmd":"true"}"#).unwrap();
    assert_eq!(m.id(), 1);
}

/// Error codes added within v1: a guest sends them only to a host of the same build (the guest
/// directory is content-addressed per server build), and no v1 shape above changed.
#[test]
fn v1_additive_error_codes() {
    for (code, name) in [
        (ErrorCode::Denied, "denied"),
        (ErrorCode::NoSpace, "no_space"),
        (ErrorCode::OutOfMemory, "out_of_memory"),
    ] {
        assert_eq!(json(&code), format!("\"{name}\""));
    }
}

/// `Pong` gained the memory guard's kills within v1: left out when there are none, so a v1
/// host of an older build reads it as before, and an old guest's bare `Pong` reads as no kills.
#[test]
fn pong_carries_oom_kills_only_when_there_are_some() {
    let bare = GuestMsg::Pong {
        id: 3,
        oom_kills: vec![],
    };
    assert_eq!(json(&bare), r#"{"type":"pong","id":3}"#);
    let old: GuestMsg = serde_json::from_str(r#"{"type":"pong","id":3}"#).unwrap();
    assert_eq!(old, bare);
    let kill = OomKill {
        pid: 9,
        name: "python3".into(),
        processes: 1,
        rss_bytes: 1,
        used_bytes: 2,
        limit_bytes: 3,
        at_ms: 4,
    };
    let with = GuestMsg::Pong {
        id: 3,
        oom_kills: vec![kill],
    };
    assert_eq!(
        json(&with),
        r#"{"type":"pong","id":3,"oom_kills":[{"pid":9,"name":"python3","processes":1,"rss_bytes":1,"used_bytes":2,"limit_bytes":3,"at_ms":4}]}"#
    );
}
