//! Store layout, cache and generation rules, with a builder that writes a few files.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::TemplateStore;
use crate::builder::Builder;
use crate::builtin::builtin;
use crate::error::{BakeError, BakeStep, StoreError};
use crate::recipe::Recipe;
use crate::testutil::TempDir;

#[derive(Default)]
struct FakeBuilder {
    builds: AtomicUsize,
    fail_build: bool,
    fail_verify: bool,
    delay: Duration,
}

impl Builder for FakeBuilder {
    fn build(
        &self,
        recipe: &Recipe,
        work_dir: &Path,
        rootfs: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<(), BakeError> {
        self.builds.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        log("fake: building");
        fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
        fs::write(rootfs.join("usr/bin/bash"), vec![0u8; 100]).unwrap();
        fs::write(rootfs.join("etc-packages"), recipe.packages.join("\n")).unwrap();
        fs::write(work_dir.join("scratch"), b"dropped before publish").unwrap();
        if self.fail_build {
            return Err(BakeError::Command {
                step: BakeStep::Bootstrap,
                program: "mmdebstrap".into(),
                status: "exit status: 1".into(),
                log_tail: vec![],
            });
        }
        Ok(())
    }

    fn verify(&self, _: &Recipe, rootfs: &Path, _: &mut dyn FnMut(&str)) -> Result<(), BakeError> {
        assert!(rootfs.join("usr/bin/bash").exists());
        if self.fail_verify {
            return Err(BakeError::Command {
                step: BakeStep::Verify,
                program: "chroot".into(),
                status: "exit status: 1".into(),
                log_tail: vec![],
            });
        }
        Ok(())
    }
}

fn store_with(builder: FakeBuilder) -> (TempDir, TemplateStore, Arc<FakeBuilder>) {
    let tmp = TempDir::new("store");
    let builder = Arc::new(builder);
    let store = TemplateStore::with_builder(tmp.path().join("templates"), builder.clone());
    (tmp, store, builder)
}

fn base() -> Recipe {
    builtin("base").unwrap()
}

/// Entries of `<root>/base`, sorted.
fn entries(store: &TemplateStore) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(store.root().join("base"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn first_bake_publishes_generation_one() {
    let (_tmp, store, _) = store_with(FakeBuilder::default());
    let mut lines = Vec::new();
    let info = store
        .bake(&base(), false, &mut |l| lines.push(l.to_owned()))
        .unwrap();
    let hash = base().hash();
    assert_eq!(info.generation, 1);
    assert_eq!(info.build_id, format!("{hash}-g1"));
    assert_eq!(
        info.rootfs,
        store
            .root()
            .join("base")
            .join(&info.build_id)
            .join("rootfs")
    );
    assert_eq!((info.cpu, info.memory_mb), (1, 512));
    assert!(info.size_bytes >= 100);
    assert!(info.built_at > 1_600_000_000);
    assert!(lines.iter().any(|l| l == "fake: building"));
    let dir = store.root().join("base");
    assert_eq!(
        fs::read_to_string(dir.join("current")).unwrap(),
        format!("{}\n", info.build_id)
    );
    assert_eq!(
        entries(&store),
        [
            ".generation".to_owned(),
            ".lock".to_owned(),
            info.build_id.clone(),
            format!("{}.log", info.build_id),
            "current".to_owned()
        ]
    );
    let build: Vec<_> = fs::read_dir(dir.join(&info.build_id))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        build.len(),
        2,
        "only rootfs and meta.json remain: {build:?}"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join(&info.build_id).join("meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["hash"], hash.as_str());
    assert_eq!(meta["generation"], 1);
    assert_eq!(meta["size_bytes"], info.size_bytes);
    assert_eq!(store.get("base").unwrap(), Some(info));
}

#[test]
fn same_hash_is_a_cache_hit_and_refreshes_resources() {
    let (_tmp, store, builder) = store_with(FakeBuilder::default());
    let first = store.bake(&base(), false, &mut |_| {}).unwrap();
    let mut bigger = base();
    bigger.memory_mb = 2048;
    let again = store.bake(&bigger, false, &mut |_| {}).unwrap();
    assert_eq!(builder.builds.load(Ordering::SeqCst), 1);
    assert_eq!(again.build_id, first.build_id);
    assert_eq!(again.memory_mb, 2048);
    assert_eq!(store.get("base").unwrap().unwrap().memory_mb, 2048);
}

#[test]
fn force_and_recipe_changes_bump_generation_and_keep_old_builds() {
    let (_tmp, store, builder) = store_with(FakeBuilder::default());
    let g1 = store.bake(&base(), false, &mut |_| {}).unwrap();
    let g2 = store.bake(&base(), true, &mut |_| {}).unwrap();
    assert_eq!((g2.generation, g2.hash.as_str()), (2, g1.hash.as_str()));
    assert_ne!(g2.rootfs, g1.rootfs);
    assert!(
        g1.rootfs.join("usr/bin/bash").exists(),
        "old rootfs untouched"
    );
    let mut changed = base();
    changed.packages.push("jq".into());
    let g3 = store.bake(&changed, false, &mut |_| {}).unwrap();
    assert_eq!(g3.generation, 3);
    assert_ne!(g3.hash, g1.hash);
    assert_eq!(builder.builds.load(Ordering::SeqCst), 3);

    let builds = store.builds("base").unwrap();
    let ids: Vec<_> = builds.iter().map(|b| (b.generation, b.current)).collect();
    assert_eq!(ids, [(1, false), (2, false), (3, true)]);
    assert_eq!(store.get("base").unwrap().unwrap().build_id, g3.build_id);
}

#[test]
fn failed_bakes_leave_nothing_but_the_log() {
    for (fail_build, fail_verify, step) in [
        (true, false, BakeStep::Bootstrap),
        (false, true, BakeStep::Verify),
    ] {
        let (_tmp, store, _) = store_with(FakeBuilder {
            fail_build,
            fail_verify,
            ..Default::default()
        });
        let err = store.bake(&base(), false, &mut |_| {}).unwrap_err();
        assert!(
            matches!(err, BakeError::Command { step: s, .. } if s == step),
            "{err:?}"
        );
        assert!(err.to_string().starts_with(&step.to_string()));
        let id = format!("{}-g1", base().hash());
        assert_eq!(entries(&store), [".lock".to_owned(), format!("{id}.log")]);
        assert_eq!(store.get("base").unwrap(), None);
    }
}

#[test]
fn failure_keeps_the_previous_current_build() {
    let (_tmp, good, _) = store_with(FakeBuilder::default());
    let g1 = good.bake(&base(), false, &mut |_| {}).unwrap();
    let bad = TemplateStore::with_builder(
        good.root(),
        Arc::new(FakeBuilder {
            fail_verify: true,
            ..Default::default()
        }),
    );
    assert!(bad.bake(&base(), true, &mut |_| {}).is_err());
    assert_eq!(good.get("base").unwrap().unwrap().build_id, g1.build_id);
    let g2 = good.bake(&base(), true, &mut |_| {}).unwrap();
    assert_eq!(
        g2.generation, 2,
        "a failed bake does not use up a generation"
    );
}

#[test]
fn stale_partial_builds_are_removed_by_the_next_bake() {
    let (_tmp, store, _) = store_with(FakeBuilder::default());
    let stale = store
        .root()
        .join("base")
        .join(format!("{}-g9.partial", base().hash()));
    fs::create_dir_all(stale.join("rootfs")).unwrap();
    let info = store.bake(&base(), false, &mut |_| {}).unwrap();
    assert!(!stale.exists());
    assert_eq!(info.generation, 1);
}

#[test]
fn remove_build_refuses_current_and_removes_old() {
    let (_tmp, store, _) = store_with(FakeBuilder::default());
    let g1 = store.bake(&base(), false, &mut |_| {}).unwrap();
    let g2 = store.bake(&base(), true, &mut |_| {}).unwrap();
    assert!(matches!(
        store.remove_build("base", &g2.build_id),
        Err(StoreError::CurrentBuild { .. })
    ));
    store.remove_build("base", &g1.build_id).unwrap();
    assert!(!g1.rootfs.exists());
    assert!(matches!(
        store.remove_build("base", &g1.build_id),
        Err(StoreError::BuildNotFound { .. })
    ));
    assert!(matches!(
        store.remove_build("base", "../x"),
        Err(StoreError::BuildNotFound { .. })
    ));
    let g3 = store.bake(&base(), true, &mut |_| {}).unwrap();
    assert_eq!(g3.generation, 3);
}

#[test]
fn list_returns_current_builds_and_skips_the_cache_dir() {
    let (_tmp, store, _) = store_with(FakeBuilder::default());
    assert!(store.list().unwrap().is_empty());
    store
        .bake_builtin("code-interpreter", false, &mut |_| {})
        .unwrap();
    store.bake_builtin("base", false, &mut |_| {}).unwrap();
    fs::create_dir_all(store.root().join(".cache/wheels")).unwrap();
    let names: Vec<_> = store.list().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["base", "code-interpreter"]);
    assert_eq!(store.get("nope").unwrap(), None);
    assert!(store.get("../etc").is_err());
}

#[test]
fn unknown_and_invalid_templates_are_errors() {
    let (_tmp, store, builder) = store_with(FakeBuilder::default());
    assert!(
        matches!(store.bake_builtin("nope", false, &mut |_| {}), Err(BakeError::UnknownTemplate(n)) if n == "nope")
    );
    let mut evil = base();
    evil.name = "../../etc".into();
    assert!(matches!(
        store.bake(&evil, false, &mut |_| {}),
        Err(BakeError::InvalidRecipe(_))
    ));
    assert_eq!(builder.builds.load(Ordering::SeqCst), 0);
}

#[test]
fn concurrent_bakes_of_one_template_build_once() {
    let (_tmp, store, builder) = store_with(FakeBuilder {
        delay: Duration::from_millis(300),
        ..Default::default()
    });
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || store.bake(&base(), false, &mut |_| {}).unwrap())
        })
        .collect();
    let infos: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(infos[0].build_id, infos[1].build_id);
    assert_eq!(builder.builds.load(Ordering::SeqCst), 1);
}

fn custom_meta() -> crate::meta::CustomMeta {
    crate::meta::CustomMeta {
        kind: crate::custom::TemplateKind::Dockerfile,
        description: "FROM base".into(),
        base: Some("base".into()),
        resources: crate::custom::Resources {
            cpu: 2,
            memory_mb: 768,
            disk_mb: 2048,
        },
        probes: Default::default(),
        runtime: Default::default(),
    }
}

/// One user build of `name` from `hash`: rootfs made, finished, then published or discarded.
fn user_build(store: &TemplateStore, name: &str, hash: &str, publish: bool) -> crate::TemplateInfo {
    let slot = store.begin_build(name, hash, || {}).unwrap();
    slot.create_work_dir().unwrap();
    fs::create_dir_all(slot.rootfs().join("etc")).unwrap();
    let finished = slot.finish_custom(42, custom_meta()).unwrap();
    let info = finished.info().clone();
    assert!(!info.current);
    assert!(info.rootfs.is_dir(), "complete before it is published");
    assert_ne!(
        store.get(name).unwrap().map(|t| t.build_id),
        Some(info.build_id.clone())
    );
    if publish {
        finished.publish().unwrap()
    } else {
        finished.discard();
        assert!(!info.rootfs.exists());
        info
    }
}

#[test]
fn user_builds_publish_into_their_workspace_store() {
    let tmp = TempDir::new("user-store");
    let store = TemplateStore::for_workspace(tmp.path().join("ws"), "ws-1");
    let hash = "ab".repeat(32);
    let info = user_build(&store, "my-tpl", &hash, true);
    assert_eq!(info.generation, 1);
    assert_eq!(info.workspace.as_deref(), Some("ws-1"));
    assert_eq!(
        (info.cpu, info.memory_mb, info.disk_mb),
        (2, 768, Some(2048))
    );
    assert_eq!(info.base.as_deref(), Some("base"));
    let got = store.get("my-tpl").unwrap().expect("current");
    assert_eq!(got, info);

    assert_eq!(store.published_generation("my-tpl").unwrap(), 1);
    // A discarded build leaves the current one alone and its generation is reused.
    let other = "cd".repeat(32);
    let discarded = user_build(&store, "my-tpl", &other, false);
    assert_eq!(discarded.generation, 2);
    assert_eq!(
        store.get("my-tpl").unwrap().unwrap().build_id,
        info.build_id
    );
    assert_eq!(user_build(&store, "my-tpl", &other, true).generation, 2);
}

#[test]
fn a_retired_template_keeps_counting_generations() {
    let tmp = TempDir::new("user-retire");
    let store = TemplateStore::for_workspace(tmp.path().join("ws"), "ws-1");
    let hash = "ab".repeat(32);
    let g1 = user_build(&store, "t", &hash, true);
    let retired = store.retire("t").unwrap().expect("was current");
    assert_eq!(retired.build_id, g1.build_id);
    assert_eq!(store.get("t").unwrap(), None);
    assert!(store.list().unwrap().is_empty());
    assert_eq!(store.names().unwrap(), ["t"]);
    // The old build stays for running sandboxes until removed, and can be removed now.
    assert!(g1.rootfs.is_dir());
    store.remove_build("t", &g1.build_id).unwrap();
    // Made again with the same inputs: a new generation, never one an old snapshot names.
    assert_eq!(user_build(&store, "t", &hash, true).generation, 2);
    assert_eq!(store.retire("missing").unwrap(), None);
}

#[test]
fn a_dropped_slot_removes_its_work_dir() {
    let tmp = TempDir::new("user-drop");
    let store = TemplateStore::for_workspace(tmp.path().join("ws"), "ws-1");
    let slot = store.begin_build("t", &"ab".repeat(32), || {}).unwrap();
    slot.create_work_dir().unwrap();
    let work = slot.work_dir().to_path_buf();
    assert!(work.is_dir());
    drop(slot);
    assert!(!work.exists());
}
