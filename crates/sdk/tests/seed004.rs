//! Seed 004 ("Code interpreter") through the Rust SDK against a real server: a code context
//! with a DataFrame as an HTML table and a chart as a base64 PNG, one-shot exec, run_code in
//! Python and shell, file uploads and downloads, the TTL. See `common` for the server.

mod common;

use base64::Engine as _;
use pandastack_sdk::{Client, ExecOptions, Language};

fn sales_csv(rows: usize) -> String {
    let mut out = String::from("day,region,units,revenue\n");
    for i in 0..rows {
        let region = ["north", "south", "east"][i % 3];
        out.push_str(&format!(
            "{i},{region},{},{}\n",
            i % 17,
            100.0 + i as f64 * 3.5
        ));
    }
    out
}

/// "Stateful code context": state across cells, `df.describe()` as HTML, a chart as PNG.
async fn code_context_rich_results(client: &Client) {
    let sandbox = client
        .sandboxes()
        .create(common::code_interpreter())
        .await
        .expect("create");
    let ctx = sandbox.create_code_context().await.expect("context");
    sandbox
        .files()
        .write("/workspace/sales.csv", sales_csv(200))
        .await
        .expect("write csv");
    ctx.run_code("import pandas as pd").await.expect("import");
    let ex = ctx
        .run_code("df = pd.read_csv('/workspace/sales.csv')")
        .await
        .expect("read csv");
    assert_eq!(ex.error, None, "{ex:?}");

    let ex = ctx.run_code("df.describe()").await.expect("describe");
    let html = ex.results.first().and_then(|r| r.get("text/html"));
    assert!(
        html.is_some_and(|h| h.contains("<table") && h.contains("revenue")),
        "{ex:?}"
    );
    assert_eq!(ex.html(), html.map(String::as_str));

    let ex = ctx
        .run_code("import matplotlib.pyplot as plt\ndf['revenue'].plot()\nplt.show()\n")
        .await
        .expect("chart");
    assert_eq!(ex.error, None, "{ex:?}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(ex.png().expect("a png result"))
        .expect("base64");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000,
        "{} bytes",
        png.len()
    );

    // An exception in a cell is data, not an error.
    let ex = ctx.run_code("1 / 0").await.expect("run");
    assert!(
        ex.error
            .as_deref()
            .is_some_and(|e| e.contains("ZeroDivisionError")),
        "{ex:?}"
    );
    ctx.close().await.expect("close");
    sandbox.kill().await.expect("kill");
}

/// "One-shot exec", "Run Python code", "File uploads", "Persistence".
async fn exec_run_code_and_files(client: &Client, dir: &std::path::Path) {
    let sandbox = client
        .sandboxes()
        .create(common::code_interpreter())
        .await
        .expect("create");
    let result = sandbox
        .exec_with(r#"python -c "print(2 + 2)""#, &ExecOptions::timeout(30))
        .await
        .expect("exec");
    assert_eq!(result.stdout, "4\n");
    assert_eq!(result.exit_code, 0);

    let out = sandbox
        .run_code("\nx = 42\ny = x * 2\nprint(x, y)\n", Language::Python)
        .await
        .expect("run_code");
    assert_eq!(out.stdout, "42 84\n");
    let out = sandbox
        .run_code("python --version", Language::Shell)
        .await
        .expect("shell");
    assert!(out.stdout.starts_with("Python 3"), "{out:?}");

    let local = dir.join("data.csv");
    std::fs::write(&local, sales_csv(120)).expect("write local csv");
    let written = sandbox
        .files()
        .upload(&local, "/workspace/data.csv")
        .await
        .expect("upload");
    assert_eq!(
        written.bytes,
        std::fs::metadata(&local).expect("stat").len()
    );
    let described = sandbox
        .run_code(
            "\nimport pandas as pd\ndf = pd.read_csv('/workspace/data.csv')\nprint(df.describe())\n",
            Language::Python,
        )
        .await
        .expect("describe");
    let head: Vec<&str> = described
        .stdout
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["day", "units", "revenue"], "{described:?}");

    let made = sandbox
        .run_code(
            "import pandas as pd; pd.read_csv('/workspace/data.csv').groupby('region').sum().to_csv('/workspace/result.csv')",
            Language::Python,
        )
        .await
        .expect("make result");
    assert_eq!(made.exit_code, 0, "{made:?}");
    let back = dir.join("result.csv");
    let n = sandbox
        .files()
        .download("/workspace/result.csv", &back)
        .await
        .expect("download");
    let remote = sandbox
        .files()
        .read("/workspace/result.csv")
        .await
        .expect("read");
    assert_eq!(std::fs::read(&back).expect("read local"), remote.to_vec());
    assert_eq!(n, remote.len() as u64);
    assert!(remote.starts_with(b"region,"), "{remote:?}");
    let info = sandbox
        .files()
        .stat("/workspace/result.csv")
        .await
        .expect("stat");
    assert!(!info.is_dir && info.size == n && info.mtime > 0, "{info:?}");
    let names: Vec<String> = sandbox
        .files()
        .list("/workspace")
        .await
        .expect("list")
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert!(
        names.contains(&"data.csv".to_string()) && names.contains(&"result.csv".to_string()),
        "{names:?}"
    );

    let lc = sandbox.set_ttl(7200).await.expect("set_ttl");
    assert_eq!(lc.ttl_seconds, 7200);
    assert_eq!(
        sandbox.lifecycle().await.expect("lifecycle").ttl_seconds,
        7200
    );
    sandbox.kill().await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_code_interpreter() {
    let dir = std::env::temp_dir().join(format!("pandastack-sdk-seed004-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let d = dir.clone();
    common::run("seed004", |client| async move {
        code_context_rich_results(&client).await;
        exec_run_code_and_files(&client, &d).await;
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
