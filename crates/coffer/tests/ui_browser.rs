//! `coffer ui` in real browsers, headless: Chromium through ChromeDriver and
//! Firefox through geckodriver, which the test command starts
//! (`COFFER_TEST_WEBDRIVER`, `COFFER_TEST_GECKODRIVER`). A user's path through
//! the pages, the same in each: log in, see the configured job, run it and
//! watch it go on and end, browse the snapshot it made, download a file and
//! compare its bytes, restore a directory after a dry run and compare it; and
//! what a hostile page or a guesser meets. A screenshot of each page is written
//! to `COFFER_UI_SCREENSHOTS` (default: the test's target directory), one
//! folder per browser, kept for when a test fails.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coffer_backend::testing::servers::{Server, absent};
use common::ui::{UI_PASSWORD, serve, with_home_job};
use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// A browser the test drives, and the WebDriver server that starts it.
#[derive(Clone, Copy)]
enum Browser {
    Chromium,
    Firefox,
}

impl Browser {
    fn name(self) -> &'static str {
        match self {
            Browser::Chromium => "chromium",
            Browser::Firefox => "firefox",
        }
    }

    /// The WebDriver server's address, or the group the test belongs to.
    fn webdriver(self) -> Result<String, Server> {
        let (var, group) = match self {
            Browser::Chromium => ("COFFER_TEST_WEBDRIVER", Server::Browser),
            Browser::Firefox => ("COFFER_TEST_GECKODRIVER", Server::Firefox),
        };
        std::env::var(var).map_err(|_| group)
    }

    fn capabilities(self) -> serde_json::Map<String, Value> {
        let mut caps = serde_json::Map::new();
        match self {
            Browser::Chromium => {
                let mut chrome = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,1000", "--no-first-run", "--disable-extensions"]});
                if let Some(bin) = std::env::var_os("COFFER_TEST_CHROMIUM") {
                    chrome["binary"] = json!(bin.to_string_lossy());
                }
                caps.insert("goog:chromeOptions".into(), chrome);
            }
            Browser::Firefox => {
                let mut firefox = json!({"args": ["-headless", "--width=1280", "--height=1000"]});
                if let Some(bin) = std::env::var_os("COFFER_TEST_FIREFOX") {
                    firefox["binary"] = json!(bin.to_string_lossy());
                }
                caps.insert("moz:firefoxOptions".into(), firefox);
            }
        }
        caps
    }
}

/// Where the screenshots go.
fn shots() -> PathBuf {
    std::env::var_os("COFFER_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots"))
}

/// A browser session, and the folder its screenshots go to.
struct Page {
    c: Client,
    shots: PathBuf,
}

impl std::ops::Deref for Page {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.c
    }
}

async fn shot(c: &Page, name: &str) {
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(c.shots.join(format!("{name}.png")), png);
    }
}

async fn browser(kind: Browser, webdriver: &str) -> Page {
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(kind.capabilities())
        .connect(webdriver)
        .await
        .unwrap_or_else(|e| panic!("cannot start a {} session at {webdriver}: {e}", kind.name()));
    let shots = shots().join(kind.name());
    std::fs::create_dir_all(&shots).unwrap();
    Page { c, shots }
}

/// Clicks `what` and waits until the page it was on is gone.
async fn click_away(c: &Page, what: Locator<'_>) -> Result<(), String> {
    let old = c.find(Locator::Css("main")).await.map_err(|e| e.to_string())?;
    c.find(what).await.map_err(|e| format!("{what:?}: {e}"))?.click().await.map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while old.text().await.is_ok() {
        if Instant::now() > deadline {
            return Err(format!("clicking {what:?} led nowhere"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Runs the job `home` from the dashboard and reloads it until the job's row
/// says `ok` and the recent runs number `runs`; a failed run is an error.
async fn run_and_wait(c: &Page, runs: usize) -> Result<(), String> {
    click_away(c, Locator::Css("button[aria-label='Run backup of home now']")).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        c.wait().for_element(Locator::Id("jobs")).await.unwrap();
        // The page redraws itself as the run goes: a look that meets a redraw is taken again.
        let listed = c.find_all(Locator::Css("section[aria-labelledby='runs'] tbody tr")).await.map_or(0, |l| l.len());
        let row = match c.find(Locator::Css("tbody tr")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if listed == runs && row.split_whitespace().any(|w| w == "ok") {
            return Ok(());
        }
        if row.contains("failed") || Instant::now() > deadline {
            shot(c, &format!("run-{runs}")).await;
            return Err(format!("run {runs} did not end well: {row}"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let old = c.find(Locator::Css("main")).await.unwrap();
        c.refresh().await.unwrap();
        while old.text().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The page's text. A page being replaced (a redirect going on, or the page
/// redrawing itself) is looked at again once it has settled.
async fn body_text(c: &Page) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let looked = match c.find(Locator::Css("main")).await {
            Ok(m) => m.text().await,
            Err(e) => Err(e),
        };
        match looked {
            Ok(t) => return t,
            Err(e) if Instant::now() > deadline => panic!("the page's text cannot be read: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Runs `script` in the page: its arguments are `args`, then the callback it ends with.
async fn in_page(c: &Page, script: &str, args: Vec<Value>) -> Value {
    c.execute_async(script, args).await.unwrap_or_else(|e| panic!("script failed: {e}"))
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_user_logs_in_runs_a_job_browses_and_downloads_in_chromium() {
    a_user_logs_in_runs_a_job_browses_and_downloads(Browser::Chromium);
}

#[test]
fn a_user_logs_in_runs_a_job_browses_and_downloads_in_firefox() {
    a_user_logs_in_runs_a_job_browses_and_downloads(Browser::Firefox);
}

fn a_user_logs_in_runs_a_job_browses_and_downloads(kind: Browser) {
    let webdriver = match kind.webdriver() {
        Ok(w) => w,
        Err(group) => return absent(group),
    };
    let env = Env::new();
    std::fs::write(env.path("ui-pass"), format!("{UI_PASSWORD}\n")).unwrap();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("docs")).unwrap();
    let content = random_bytes(3 << 20, 9);
    std::fs::write(src.join("docs/report.bin"), &content).unwrap();
    std::fs::write(src.join("docs/notes.txt"), b"last Tuesday's notes").unwrap();
    let cmd = with_home_job(&env, &src);
    // At 1 MiB/s the first backup takes about three seconds: long enough to watch.
    let mut jobs = std::fs::read_to_string(env.path("jobs.toml")).unwrap();
    jobs.push_str("limit-upload = 1024\n");
    std::fs::write(env.path("jobs.toml"), jobs).unwrap();
    let pass = env.path("ui-pass");
    let ui = serve(cmd, &env.path("state"), &["--ui-password-file", pass.to_str().unwrap()]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let result = rt.block_on(async {
        let c = browser(kind, &webdriver).await;
        let (page, base, target) =
            (Page { c: c.c.clone(), shots: c.shots.clone() }, ui.base.clone(), env.path("restored"));
        // In a task of its own, so that a panic in it still ends the session
        // (geckodriver serves one session at a time).
        let walked = tokio::spawn(async move { journey(&page, &base, &src, &content, &target).await }).await;
        shot(&c, "last").await;
        let _ = c.c.clone().close().await;
        let result = walked.unwrap_or_else(|e| Err(format!("the test panicked: {e}")));
        result.map_err(|e| format!("{} (screenshots in {})", e, c.shots.display()))
    });
    if let Err(e) = result {
        panic!("{}: {e}", kind.name());
    }
}

/// Runs the job `home` from the dashboard and, without reloading, watches its
/// figures go by and its row say `ok` once the page has redrawn itself.
async fn run_and_watch(c: &Page) -> Result<(), String> {
    click_away(c, Locator::Css("button[aria-label='Run backup of home now']")).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = None;
    loop {
        // The page may be redrawn between two looks: every look starts afresh.
        if seen.is_none()
            && let Ok(e) = c.find(Locator::Css("[data-live='job:home'] .figures")).await
            && let Ok(t) = e.text().await
            && t.contains("MiB")
        {
            shot(c, "dashboard-running").await;
            seen = Some(t);
        }
        let row = match c.find(Locator::Css("tbody tr")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if seen.is_some() && row.split_whitespace().any(|w| w == "ok") {
            return Ok(());
        }
        if row.contains("failed") || Instant::now() > deadline {
            shot(c, "run-watched").await;
            return Err(format!("the run was not seen going on and ending (figures {seen:?}): {row}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn journey(c: &Page, base: &str, src: &Path, content: &[u8], target: &Path) -> Result<(), String> {
    // Without a session, the login page.
    c.goto(&format!("{base}/")).await.map_err(|e| e.to_string())?;
    let url = c.current_url().await.unwrap();
    if !url.path().ends_with("/login") {
        return Err(format!("not sent to the login page: {url}"));
    }
    shot(c, "login").await;

    // Guessing: the fifth wrong password in a minute is answered late.
    for i in 0..5 {
        let field = c.find(Locator::Id("secret")).await.unwrap();
        field.send_keys("not the password").await.unwrap();
        let t = Instant::now();
        click_away(c, Locator::Css("form button")).await?;
        c.wait().for_element(Locator::Css("p.bad")).await.unwrap();
        let took = t.elapsed();
        let text = body_text(c).await;
        if !text.contains("wrong password or login token") {
            return Err(format!("attempt {i}: {text}"));
        }
        if i == 4 && took < Duration::from_millis(950) {
            return Err(format!("the fifth failure came back after {took:?}, undelayed"));
        }
    }
    shot(c, "login-refused").await;

    // The password opens the dashboard, which shows the job, never run.
    c.find(Locator::Id("secret")).await.unwrap().send_keys(UI_PASSWORD).await.unwrap();
    click_away(c, Locator::Css("form button")).await?;
    c.wait().for_element(Locator::Id("jobs")).await.unwrap();
    let text = body_text(c).await;
    if !(text.contains("home") && text.contains("never run")) {
        return Err(format!("the dashboard does not show the job: {text}"));
    }
    shot(c, "dashboard").await;

    // A page's script posting without the CSRF token is refused.
    let status = in_page(
        c,
        "const done = arguments[arguments.length - 1]; fetch('/api/v1/logout', {method: 'POST'}).then(r => done(r.status));",
        vec![],
    )
    .await;
    if status != json!(403) {
        return Err(format!("a POST without a CSRF token got {status}"));
    }

    // Run the backup now and watch it end, the page kept current by itself.
    run_and_watch(c).await?;
    shot(c, "dashboard-after-run").await;

    // Browse: the repository, its snapshot, down to the file.
    click_away(c, Locator::LinkText("default")).await?;
    c.wait().for_element(Locator::Css("table")).await.unwrap();
    shot(c, "snapshots").await;
    click_away(c, Locator::Css("tbody tr td a")).await?;
    for part in src.iter().skip(1).chain([std::ffi::OsStr::new("docs")]) {
        let name = format!("{}/", part.to_string_lossy());
        click_away(c, Locator::LinkText(&name)).await?;
    }
    c.wait().for_element(Locator::Css("a[aria-label='Download report.bin']")).await.unwrap();
    let text = body_text(c).await;
    if !(text.contains("notes.txt") && text.contains("3.0 MiB")) {
        return Err(format!("the directory page lacks its files: {text}"));
    }
    shot(c, "browse").await;

    // Download the file in the page and compare its bytes.
    let href =
        c.find(Locator::Css("a[aria-label='Download report.bin']")).await.unwrap().attr("href").await.unwrap().unwrap();
    let digest = in_page(
        c,
        "const done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => crypto.subtle.digest('SHA-256', b))\
         .then(d => done(Array.from(new Uint8Array(d)).map(x => x.toString(16).padStart(2, '0')).join('')))\
         .catch(e => done('error: ' + e));",
        vec![json!(href)],
    )
    .await;
    if digest != json!(sha256_hex(content)) {
        return Err(format!("the downloaded file differs: {digest}"));
    }

    // The directory as a tar, fetched as its link gives it: whole, holding both files.
    let tar = c
        .find(Locator::Css("a[href*='/archive?'][href$='format=tar']"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    let got = in_page(
        c,
        "const done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => r.arrayBuffer().then(b => \
         done(r.status + ' ' + b.byteLength + ' ' + new TextDecoder().decode(b).includes(\"last Tuesday's notes\"))))\
         .catch(e => done('error: ' + e));",
        vec![json!(tar)],
    )
    .await;
    let parts: Vec<String> = got.as_str().unwrap_or_default().split(' ').map(str::to_string).collect();
    if parts.len() != 3
        || parts[0] != "200"
        || parts[1].parse::<usize>().unwrap_or(0) <= content.len()
        || parts[2] != "true"
    {
        return Err(format!("the directory's tar is not whole: {got}"));
    }
    // A text file's page shows its text.
    click_away(c, Locator::LinkText("notes.txt")).await?;
    let text = body_text(c).await;
    if !text.contains("last Tuesday's notes") {
        return Err(format!("the preview does not show the text: {text}"));
    }
    shot(c, "preview").await;
    c.back().await.unwrap();

    // A download path that climbs out is refused, in words.
    let climb = href.split("?path=").next().unwrap().to_string() + "?path=..%2F..%2Fetc%2Fpasswd";
    c.goto(&format!("{base}{climb}")).await.unwrap();
    let text = body_text(c).await;
    if !text.contains("paths are relative to the snapshot's root") {
        return Err(format!("a climbing path was not refused: {text}"));
    }
    shot(c, "refused-path").await;

    // Change a file and run the job again; then compare the two snapshots.
    std::fs::write(src.join("docs/notes.txt"), b"this Tuesday's notes, longer").unwrap();
    c.goto(&format!("{base}/")).await.unwrap();
    run_and_wait(c, 2).await?;
    click_away(c, Locator::LinkText("default")).await?;
    shot(c, "snapshots-two").await;
    let text = body_text(c).await;
    if text.contains("bad signature") {
        return Err(format!("a snapshot of this machine's is shown as unsigned: {text}"));
    }
    click_away(c, Locator::Css("form[action$='/diff'] button")).await?;
    let text = body_text(c).await;
    if !(text.contains("1 modified") && text.contains("docs/notes.txt")) {
        return Err(format!("the diff does not show the change: {text}"));
    }
    shot(c, "diff").await;

    // Restore the directory: the form, the dry run's figures, then the restore.
    c.back().await.unwrap();
    click_away(c, Locator::Css("tbody tr td a")).await?;
    for part in src.iter().skip(1).chain([std::ffi::OsStr::new("docs")]) {
        click_away(c, Locator::LinkText(&format!("{}/", part.to_string_lossy()))).await?;
    }
    click_away(c, Locator::LinkText("Restore this directory")).await?;
    c.find(Locator::Id("target")).await.unwrap().send_keys(&target.display().to_string()).await.unwrap();
    click_away(c, Locator::Css("button[value='dry-run']")).await?;
    let text = body_text(c).await;
    if !text.contains("2 files") || target.exists() {
        return Err(format!("the dry run's page is wrong, or it wrote: {text}"));
    }
    shot(c, "restore-preview").await;
    click_away(c, Locator::Css("button[value='run']")).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = body_text(c).await;
        if text.contains("done") {
            break;
        }
        if text.contains("failed") || Instant::now() > deadline {
            return Err(format!("the restore did not end well: {text}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shot(c, "restored").await;
    let got = std::fs::read(target.join("report.bin")).map_err(|e| format!("report.bin not restored: {e}"))?;
    if got != content
        || std::fs::read(target.join("notes.txt")).ok().as_deref() != Some(&b"this Tuesday's notes, longer"[..])
    {
        return Err("the restored files differ from the snapshot's".into());
    }

    // Health: never checked; Check now runs one, which the page then shows.
    c.goto(&format!("{base}/")).await.unwrap();
    click_away(c, Locator::LinkText("never")).await?;
    click_away(c, Locator::Css("button[aria-label='Check now with job home']")).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.goto(&format!("{base}/repos/default/health")).await.unwrap();
        let text = body_text(c).await;
        if text.contains("Last check: success") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the check started from the health page did not end well: {text}"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    shot(c, "health").await;

    // Forget the older snapshot: its dry run, then the confirmation.
    c.goto(&format!("{base}/repos/default")).await.unwrap();
    let links = c.find_all(Locator::Css("a[aria-label^='Forget ']")).await.unwrap();
    let Some(older) = links.last() else { return Err("no Forget link on the snapshot list".into()) };
    older.click().await.unwrap();
    c.wait().for_element(Locator::Css("form[action$='/forget'] button")).await.unwrap();
    shot(c, "forget-dry-run").await;
    click_away(c, Locator::Css("form[action$='/forget'] button")).await?;
    let text = body_text(c).await;
    if !text.contains("Forgot 1 snapshot") {
        return Err(format!("the forget did not go through: {text}"));
    }
    c.goto(&format!("{base}/repos/default")).await.unwrap();
    if c.find_all(Locator::Css("a[aria-label^='Forget ']")).await.unwrap().len() != 1 {
        return Err(format!("one snapshot should be left: {}", body_text(c).await));
    }

    // Log out: the dashboard is behind the login again.
    c.goto(&format!("{base}/")).await.unwrap();
    click_away(c, Locator::Css("nav form button")).await?;
    c.wait().for_element(Locator::Id("secret")).await.unwrap();
    Ok(())
}
