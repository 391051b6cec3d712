//! `examples/web_service.rs` as a user runs it: started in an empty folder, driven through a
//! real HTTP client (awc): commands reach the persistent actors, queries read the read model
//! the projection keeps, readiness answers, and Ctrl-C shuts it down cleanly.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn web_service() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let path = profile_dir
        .join("examples")
        .join(format!("web_service{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "cargo test builds examples; missing {}",
        path.display()
    );
    path
}

/// The running service, killed when dropped.
struct Service {
    child: Child,
    base: String,
}

impl Service {
    fn start(dir: &std::path::Path) -> Service {
        let mut command = Command::new(web_service());
        command
            .current_dir(dir)
            .env("WEB_SERVICE_ADDR", "127.0.0.1:0")
            .env_remove("ACTIX_PERSISTENCE_CONFIG")
            .stdout(Stdio::piped());
        for (key, _) in std::env::vars() {
            if key.starts_with("ACTIX_PERSISTENCE__") {
                command.env_remove(key);
            }
        }
        let mut child = command.spawn().expect("start the web service");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        let base = line
            .trim()
            .strip_prefix("web_service: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Service { child, base }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post(client: &awc::Client, url: String, amount: u64) -> (u16, Value) {
    let mut response = client
        .post(url)
        .send_json(&json!({ "amount": amount }))
        .await
        .expect("the service answers");
    let bytes = response.body().await.expect("a body");
    // A body that is not JSON (a 503's error text) comes back as a string, for the message.
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (response.status().as_u16(), body)
}

async fn get(client: &awc::Client, url: String) -> (u16, Option<Value>) {
    let mut response = client.get(url).send().await.expect("the service answers");
    let status = response.status().as_u16();
    (status, response.json::<Value>().await.ok())
}

#[actix_rt::test]
async fn commands_over_http_reach_the_actors_and_queries_read_the_read_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = Service::start(dir.path());
    let client = awc::Client::default();
    let base = &service.base;

    assert_eq!(
        post(&client, format!("{base}/accounts/1/deposit"), 100).await,
        (200, json!({ "balance": 100 }))
    );
    assert_eq!(
        post(&client, format!("{base}/accounts/1/withdraw"), 30).await,
        (200, json!({ "balance": 70 }))
    );
    assert_eq!(
        post(&client, format!("{base}/accounts/2/deposit"), 5).await,
        (200, json!({ "balance": 5 }))
    );
    // Refused by the actor: nothing persisted.
    assert_eq!(
        post(&client, format!("{base}/accounts/2/withdraw"), 50).await,
        (409, json!({ "error": "insufficient funds", "balance": 5 }))
    );

    // The read model follows within the projection's poll interval; its progress (published
    // in batches, after the read model's transaction) follows too.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let one = get(&client, format!("{base}/accounts/1")).await;
        let two = get(&client, format!("{base}/accounts/2")).await;
        let (status, progress) = get(&client, format!("{base}/projection")).await;
        assert_eq!(status, 200);
        let progress = progress.expect("progress JSON");
        if one == (200, Some(json!({ "id": "1", "balance": 70 })))
            && two == (200, Some(json!({ "id": "2", "balance": 5 })))
            && progress["handled"] == json!(3)
        {
            assert_eq!(progress["lag_events"], json!(0));
            assert_eq!(progress["state"], json!("Running"));
            break;
        }
        assert!(
            progress["handled"]
                .as_u64()
                .is_some_and(|handled| handled <= 3),
            "the projection handled more events than were persisted: {progress}"
        );
        assert!(
            Instant::now() < deadline,
            "read model never caught up: {one:?} {two:?} {progress}"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&client, format!("{base}/accounts/3")).await.0, 404);

    let mut ready = client
        .get(format!("{base}/ready"))
        .send()
        .await
        .expect("the service answers");
    assert_eq!(ready.status().as_u16(), 200);
    assert_eq!(ready.body().await.expect("body").as_ref(), b"ready");

    // Ctrl-C: the service stops its projection and shuts persistence down, leaving the SQLite
    // file complete and without its -wal and -shm files.
    drop(client);
    let mut service = service;
    let interrupted = Command::new("kill")
        .args(["-INT", &service.child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = service.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the service did not stop on SIGINT"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
    for leftover in ["actix-persistence.db-wal", "actix-persistence.db-shm"] {
        assert!(
            !dir.path().join(leftover).exists(),
            "{leftover} left behind: the service did not shut down cleanly"
        );
    }
}

/// A deposit the balance cannot hold (here `u64::MAX` on top of 1) is refused by the actor
/// before anything is persisted: `apply` never overflows, the account keeps working, and it
/// still recovers after a restart.
#[actix_rt::test]
async fn a_deposit_the_balance_cannot_hold_is_refused_and_the_account_keeps_working() {
    let dir = tempfile::tempdir().expect("temp dir");
    let service = Service::start(dir.path());
    let client = awc::Client::default();
    let base = &service.base;

    assert_eq!(
        post(&client, format!("{base}/accounts/1/deposit"), 1).await,
        (200, json!({ "balance": 1 }))
    );
    let (status, body) = post(&client, format!("{base}/accounts/1/deposit"), u64::MAX).await;
    assert!(
        (400..500).contains(&status),
        "refused as a client error, not {status} {body}"
    );
    assert_eq!(body["balance"], json!(1), "{body}");
    // Above what the read model's INTEGER column holds, even on an empty account.
    let (status, body) = post(
        &client,
        format!("{base}/accounts/2/deposit"),
        i64::MAX as u64 + 1,
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert_eq!(body["balance"], json!(0), "{body}");

    assert_eq!(
        post(&client, format!("{base}/accounts/1/deposit"), 2).await,
        (200, json!({ "balance": 3 }))
    );
    assert_eq!(
        post(&client, format!("{base}/accounts/1/withdraw"), 1).await,
        (200, json!({ "balance": 2 }))
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let one = get(&client, format!("{base}/accounts/1")).await;
        if one == (200, Some(json!({ "id": "1", "balance": 2 }))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "read model never caught up: {one:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&client, format!("{base}/accounts/2")).await.0, 404);

    // A restart recovers the account from its events (none of them the refused deposit).
    drop(service);
    let service = Service::start(dir.path());
    let base = &service.base;
    assert_eq!(
        post(&client, format!("{base}/accounts/1/deposit"), 1).await,
        (200, json!({ "balance": 3 }))
    );
}
