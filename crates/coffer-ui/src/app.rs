//! Routing (docs/design.md#ui-api): each request is checked in this order:
//! the Host header (a loopback UI without TLS answers only to its own
//! addresses, so a page of another site cannot reach it by DNS rebinding), the
//! Origin of a POST, the session, the CSRF token of a POST; then it is handled.
//! Pages under `/`, JSON under `/api/v1/`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use crate::brief::Brief;
use coffer_agent::config::Kind;
use coffer_core::Id;
use coffer_core::format::tree::{Node, NodeKind};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::downloads::{self, ChannelBody, blocking};
use crate::events::Item;
use crate::gate::{self, Gate};
use crate::http::{self as h, Body, esc};
use crate::jobs::{Jobs, StartError};
use crate::pages;
use crate::preview::{self, Preview};
use crate::repos::{Page, RepoView, ViewError};
use crate::restores::{Order, Restores};

const SESSION_COOKIE: &str = "coffer_session";
/// Entries of a directory per page, by default and at most.
pub const PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;
/// Entries a search by name lists, at most.
const FIND_LIMIT: usize = 1000;
/// Changes of a diff listed, at most (all are counted).
const DIFF_LIMIT: usize = 10_000;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/ui.js");

/// What [`App::new`] is made of.
pub struct AppParts {
    pub gate: Gate,
    pub repos: Vec<RepoView>,
    pub jobs: Option<Jobs>,
    pub local: SocketAddr,
    pub tls: bool,
    pub on_token: Arc<dyn Fn(&str) + Send + Sync>,
    pub bench_report: Option<std::path::PathBuf>,
}

/// The UI's state, shared by every connection.
pub struct App {
    gate: Gate,
    repos: Vec<Arc<RepoView>>,
    jobs: Option<Arc<Jobs>>,
    tls: bool,
    /// The Host values a plain loopback UI answers to (None: any, under TLS).
    hosts: Option<Vec<String>>,
    /// The origins a POST may come from.
    origins: Vec<String>,
    on_token: Arc<dyn Fn(&str) + Send + Sync>,
    restores: Restores,
    bench_report: Option<std::path::PathBuf>,
}

/// The dashboard's jobs, what runs now, recent runs and repositories.
type Dashboard = (Vec<coffer_agent::status::KindStatus>, Vec<Item>, Vec<coffer_agent::state::Run>, Vec<Value>);

/// A request's session.
struct Session {
    id: String,
    csrf: String,
}

/// A failed request: its status and message.
pub struct Fail(pub StatusCode, pub String);

impl From<ViewError> for Fail {
    fn from(e: ViewError) -> Self {
        let status = match &e {
            ViewError::NotFound(_) => StatusCode::NOT_FOUND,
            ViewError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ViewError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ViewError::Repo(_) => StatusCode::BAD_GATEWAY,
        };
        Fail(status, e.to_string())
    }
}

pub fn fail(status: StatusCode, message: impl Into<String>) -> Fail {
    Fail(status, message.into())
}

impl App {
    pub fn new(p: AppParts) -> App {
        let port = p.local.port();
        let mut names = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
        names.push(match p.local {
            SocketAddr::V4(a) => format!("{}:{port}", a.ip()),
            SocketAddr::V6(a) => format!("[{}]:{port}", a.ip()),
        });
        names.dedup();
        let scheme = if p.tls { "https" } else { "http" };
        let origins = names.iter().map(|n| format!("{scheme}://{n}")).collect();
        App {
            gate: p.gate,
            repos: p.repos.into_iter().map(Arc::new).collect(),
            jobs: p.jobs.map(Arc::new),
            tls: p.tls,
            hosts: if p.tls { None } else { Some(names) },
            origins,
            on_token: p.on_token,
            restores: Restores::default(),
            bench_report: p.bench_report,
        }
    }

    /// Answers one request; never fails (a failure is an error response).
    pub async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>, client: IpAddr) -> Response<Body> {
        let api = req.uri().path().starts_with("/api/");
        let began = Instant::now();
        let mut r = match self.clone().route(req, client).await {
            Ok(r) => r,
            Err(Fail(status, message)) if api => h::json_error(status, &message),
            Err(Fail(status, message)) => h::html(status, pages::error(status, &message)),
        };
        // A body left unread ends the connection: say so, so that the client
        // does not send its next request on it.
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        // The time the server took to answer (for a download: to its first byte).
        let took = format!("app;dur={:.1}", began.elapsed().as_secs_f64() * 1000.0);
        if let Ok(v) = HeaderValue::from_str(&took) {
            r.headers_mut().insert("server-timing", v);
        }
        r
    }

    /// Drops what an idle UI need not hold (the decoded trees unused for a
    /// minute); says whether anything was dropped.
    pub fn expire(&self, now: Instant) -> bool {
        let mut any = false;
        for r in &self.repos {
            any |= r.expire_trees(now);
        }
        any
    }

    fn host_ok(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let Some(hosts) = &self.hosts else { return true };
        let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok());
        host.is_some_and(|h| hosts.iter().any(|n| n.eq_ignore_ascii_case(h)))
    }

    /// A POST's Origin, when the browser gives one, must be this server's; so
    /// must its `Sec-Fetch-Site`.
    fn origin_ok(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let site = req.headers().get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if site.is_some_and(|s| s != "same-origin" && s != "none") {
            return false;
        }
        match req.headers().get(header::ORIGIN).map(|v| v.to_str()) {
            None => true,
            Some(Ok(o)) => self.tls || self.origins.iter().any(|n| n.eq_ignore_ascii_case(o)),
            Some(Err(_)) => false,
        }
    }

    fn session(&self, req: &Request<hyper::body::Incoming>) -> Option<Session> {
        let id = h::cookie(req.headers(), SESSION_COOKIE)?;
        let csrf = self.gate.session(&id, Instant::now())?;
        Some(Session { id, csrf })
    }

    fn session_cookie(&self, value: &str, max_age: Option<u64>) -> HeaderValue {
        let secure = if self.tls { "; Secure" } else { "" };
        let age = max_age.map_or(String::new(), |s| format!("; Max-Age={s}"));
        HeaderValue::from_str(&format!("{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/{secure}{age}"))
            .expect("hex and fixed text make a header value")
    }

    fn repo(&self, name: &str) -> Result<Arc<RepoView>, Fail> {
        self.repos
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .ok_or_else(|| fail(StatusCode::NOT_FOUND, format!("no repository {name:?}")))
    }

    fn jobs(&self) -> Result<Arc<Jobs>, Fail> {
        self.jobs.clone().ok_or_else(|| fail(StatusCode::NOT_FOUND, "no jobs file: the UI shows no jobs"))
    }

    async fn route(
        self: Arc<Self>,
        req: Request<hyper::body::Incoming>,
        client: IpAddr,
    ) -> Result<Response<Body>, Fail> {
        if !self.host_ok(&req) {
            return Err(fail(StatusCode::MISDIRECTED_REQUEST, "this server does not answer to that host name"));
        }
        let path = req.uri().path().to_string();
        let segs: Vec<&str> = path.split('/').skip(1).collect();
        let method = req.method().clone();
        if method == Method::POST && !self.origin_ok(&req) {
            return Err(fail(StatusCode::FORBIDDEN, "a request from another site's page is refused"));
        }
        // What needs no session.
        match (&method, segs.as_slice()) {
            (&Method::GET, ["assets", "style.css"]) => {
                return Ok(h::respond(StatusCode::OK, "text/css; charset=utf-8", h::full(STYLE)));
            }
            (&Method::GET, ["assets", "ui.js"]) => {
                return Ok(h::respond(StatusCode::OK, "text/javascript; charset=utf-8", h::full(SCRIPT)));
            }
            (&Method::GET, ["login"]) => return Ok(h::html(StatusCode::OK, pages::login(None))),
            (&Method::POST, ["login"]) => return self.login(req, client, false).await,
            (&Method::POST, ["api", "v1", "login"]) => return self.login(req, client, true).await,
            _ => {}
        }
        let api = segs.first() == Some(&"api");
        let Some(session) = self.session(&req) else {
            if api {
                return Err(fail(StatusCode::UNAUTHORIZED, "log in first: POST /api/v1/login"));
            }
            return Ok(h::see_other("/login"));
        };
        let query = h::query(req.uri());
        if method == Method::POST {
            let given_header = req.headers().get("x-csrf-token").and_then(|v| v.to_str().ok()).map(str::to_string);
            let body = h::read_body(req.into_body())
                .await
                .map_err(|_| fail(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large or broken"))?;
            let form = h::decode_pairs(&body);
            let given = given_header.or_else(|| form.get("csrf").map(|v| String::from_utf8_lossy(v).into_owned()));
            if !given.is_some_and(|g| gate::csrf_matches(&session.csrf, &g)) {
                return Err(fail(StatusCode::FORBIDDEN, "the request lacks this session's CSRF token"));
            }
            return self.post(&segs, &session, &body, &form).await;
        }
        if method != Method::GET && method != Method::HEAD {
            return Err(fail(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not served here")));
        }
        let text = |k: &str| query.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        let number = |k: &str, default: usize| -> Result<usize, Fail> {
            match text(k) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| fail(StatusCode::BAD_REQUEST, format!("{k}={v:?} is not a number"))),
            }
        };
        let entry_path = query.get("path").cloned().unwrap_or_default();
        match segs.as_slice() {
            [""] => {
                let (jobs, live, runs, repos) = self.clone().blocking(move |a| a.dashboard_data()).await?;
                Ok(h::html(StatusCode::OK, pages::dashboard(&session.csrf, &jobs, &live, &runs, &repos)))
            }
            ["repos", r, "snapshots", id, "restore"] => {
                let (repo, id2) = (self.repo(r)?, id.to_string());
                let snap = blocking(move || Ok(repo.snapshot(&id2)?)).await?;
                crate::repos::components(&entry_path).map_err(Fail::from)?;
                Ok(h::html(StatusCode::OK, pages::restore::form(&session.csrf, r, &snap, &entry_path, "", None)))
            }
            ["restores"] => {
                let all: Vec<Value> = self.restores.all().iter().map(|t| t.to_json()).collect();
                Ok(h::html(StatusCode::OK, pages::restore::list(&session.csrf, &all)))
            }
            ["restores", n] | ["api", "v1", "restores", n] => {
                let t = n.parse().ok().and_then(|n| self.restores.get(n));
                let t =
                    t.ok_or_else(|| fail(StatusCode::NOT_FOUND, format!("no restore #{n} in this UI's history")))?;
                let v = t.to_json();
                if api {
                    return Ok(h::json(StatusCode::OK, &v));
                }
                let end = t.end();
                let outcome = end.as_ref().and_then(|e| e.result.as_ref().ok());
                let live = end.is_none().then(|| crate::events::restore_item(&t));
                Ok(h::html(StatusCode::OK, pages::restore::task(&session.csrf, &v, &t.order, outcome, live.as_ref())))
            }
            ["api", "v1", "restores"] => {
                let all: Vec<Value> = self.restores.all().iter().map(|t| t.to_json()).collect();
                Ok(h::json(StatusCode::OK, &json!({"type": "restores", "restores": all})))
            }
            ["api", "v1", "events"] => {
                let me = self.clone();
                let items: Arc<dyn Fn() -> Vec<Item> + Send + Sync> = Arc::new(move || me.live_items());
                let (me, id) = (self.clone(), session.id.clone());
                let alive: Arc<dyn Fn() -> bool + Send + Sync> = Arc::new(move || me.gate.alive(&id, Instant::now()));
                let rx = crate::events::stream(items, alive);
                Ok(h::respond(StatusCode::OK, "text/event-stream", ChannelBody(rx).boxed()))
            }
            ["repos", r] => {
                let filter = Filter::of(text)?;
                let (offset, rows) = (number("offset", 0)?, number("limit", pages::SNAPSHOT_ROWS)?);
                if rows == 0 || rows > pages::MAX_SNAPSHOT_ROWS {
                    return Err(fail(
                        StatusCode::BAD_REQUEST,
                        format!("limit={rows}: a page shows 1 to {} snapshots", pages::MAX_SNAPSHOT_ROWS),
                    ));
                }
                let repo = self.repo(r)?;
                let snaps = blocking(move || repo.snapshots().map_err(Fail::from)).await?;
                let shown: Vec<&(Id, Brief)> = snaps.iter().filter(|(_, s)| filter.matches(s)).collect();
                let job = self.repo(r)?.policy_job().map(str::to_string);
                let page = pages::SnapshotPage { filter: &filter, offset, rows, policy_job: job.as_deref() };
                Ok(h::html(StatusCode::OK, pages::snapshots(&session.csrf, r, &shown, &page)))
            }
            ["repos", r, "snapshots", id] => {
                let (offset, limit) = (number("offset", 0)?, number("limit", PAGE)?.clamp(1, MAX_PAGE));
                let (repo, id2, p) = (self.repo(r)?, id.to_string(), entry_path.clone());
                let (snap, page) =
                    blocking(move || Ok((repo.snapshot(&id2)?, repo.list(&id2, &p, offset, limit)?))).await?;
                Ok(h::html(StatusCode::OK, pages::browse(&session.csrf, r, &snap, &entry_path, &page, limit)))
            }
            ["repos", r, "snapshots", id, "download"] | ["api", "v1", "repos", r, "snapshots", id, "content"] => {
                downloads::file(self.repo(r)?, id.to_string(), entry_path, downloads::Disposition::Attachment).await
            }
            ["repos", r, "snapshots", id, "image"] | ["api", "v1", "repos", r, "snapshots", id, "image"] => {
                downloads::file(self.repo(r)?, id.to_string(), entry_path, downloads::Disposition::Image).await
            }
            ["repos", r, "snapshots", id, "preview"] | ["api", "v1", "repos", r, "snapshots", id, "preview"] => {
                let (view, id2, p) = (self.repo(r)?, id.to_string(), entry_path.clone());
                let (snap, node, shown) = blocking(move || {
                    let snap = view.snapshot(&id2)?;
                    let (repo, node, shown) = view.file(&id2, &p)?;
                    let preview = preview::of(&repo, &node, &shown)?;
                    Ok((snap, node, preview))
                })
                .await?;
                if api {
                    return Ok(h::json(StatusCode::OK, &preview_json(&entry_path, &node, &shown)));
                }
                Ok(h::html(StatusCode::OK, pages::preview(&session.csrf, r, &snap, &entry_path, &node, &shown)))
            }
            ["repos", r, "snapshots", id, "archive"] | ["api", "v1", "repos", r, "snapshots", id, "archive"] => {
                let format = match text("format").as_deref() {
                    None | Some("tar") => coffer_archive::Format::Tar,
                    Some("zip") => coffer_archive::Format::Zip,
                    Some(f) => return Err(fail(StatusCode::BAD_REQUEST, format!("format={f:?}: give tar or zip"))),
                };
                downloads::archive(self.repo(r)?, id.to_string(), entry_path, format).await
            }
            ["repos", r, "health"] | ["api", "v1", "repos", r, "health"] => {
                let (view, me) = (self.repo(r)?, self.clone());
                let (checks, replicas, log, bench) = blocking(move || {
                    let checks = me.checks(&view.jobs, 20)?;
                    let bench = me.bench_report.as_deref().and_then(crate::health::bench_report);
                    Ok((checks, view.replicas(), view.server_log(), bench))
                })
                .await?;
                let jobs = self.repo(r)?.jobs.clone();
                let shown = pages::health::Shown {
                    repo: r,
                    jobs: &jobs,
                    checks: &checks,
                    replicas: replicas.as_ref(),
                    server_log: log.as_ref(),
                    bench: bench.as_ref(),
                };
                if api {
                    return Ok(h::json(StatusCode::OK, &health_json(&shown)));
                }
                Ok(h::html(StatusCode::OK, pages::health::page(&session.csrf, &shown)))
            }
            ["repos", r, "forget"] => {
                let (view, policy, ids) = (self.repo(r)?, text("policy").is_some(), text("snapshots"));
                let plan = blocking(move || Ok(plan(&view, policy, ids.as_deref().unwrap_or_default())?)).await?;
                Ok(h::html(StatusCode::OK, pages::forget::plan(&session.csrf, r, &plan)))
            }
            ["repos", r, "diff"] | ["api", "v1", "repos", r, "diff"] => {
                let (from, to) = (text("from").unwrap_or_default(), text("to").unwrap_or_default());
                let limit = number("limit", DIFF_LIMIT)?.clamp(1, DIFF_LIMIT);
                let repo = self.repo(r)?;
                let d = blocking(move || Ok(repo.diff(&from, &to, limit)?)).await?;
                if api {
                    Ok(h::json(StatusCode::OK, &diff_json(&d)))
                } else {
                    Ok(h::html(StatusCode::OK, pages::diff(&session.csrf, r, &d)))
                }
            }
            ["repos", r, "find"] | ["api", "v1", "repos", r, "find"] => {
                let pattern = text("pattern").unwrap_or_default();
                if pattern.is_empty() {
                    return Err(fail(StatusCode::BAD_REQUEST, "give a name pattern to find: pattern=*.txt"));
                }
                let only = text("snapshot").filter(|s| !s.is_empty());
                let limit = number("limit", FIND_LIMIT)?.clamp(1, FIND_LIMIT);
                let (repo, p) = (self.repo(r)?, pattern.clone());
                let (found, full) = blocking(move || Ok(repo.find(&p, only.as_deref(), limit)?)).await?;
                if api {
                    let list: Vec<Value> = found
                        .iter()
                        .map(|f| {
                            let mut e = entry_json(b"", &f.node);
                            e["path"] = json!(h::encode_query(&f.path));
                            e["snapshot"] = json!(f.snapshot);
                            e["time"] = json!(f.time);
                            e
                        })
                        .collect();
                    Ok(h::json(
                        StatusCode::OK,
                        &json!({"type": "found", "pattern": pattern, "found": list, "truncated": full}),
                    ))
                } else {
                    Ok(h::html(StatusCode::OK, pages::found(&session.csrf, r, &pattern, &found, full)))
                }
            }
            ["api", "v1", "session"] => Ok(h::json(StatusCode::OK, &json!({"type": "session", "csrf": session.csrf}))),
            ["api", "v1", "jobs"] => {
                let (jobs, live, runs, _) = self.clone().blocking(move |a| a.dashboard_data()).await?;
                let kinds: Vec<Value> = jobs
                    .iter()
                    .map(|k| {
                        let mut v = pages::kind_json(k);
                        let key = format!("job:{}", k.job);
                        if let Some(i) = live.iter().find(|i| i.key == key && k.running.is_some()) {
                            v["progress"] = i.figures.clone();
                        }
                        v
                    })
                    .collect();
                Ok(h::json(
                    StatusCode::OK,
                    &json!({"type": "jobs", "jobs": kinds, "runs": runs.iter().map(pages::run_json).collect::<Vec<_>>()}),
                ))
            }
            ["api", "v1", "repos"] => {
                let (_, _, _, repos) = self.clone().blocking(move |a| a.dashboard_data()).await?;
                Ok(h::json(StatusCode::OK, &json!({"type": "repositories", "repositories": repos})))
            }
            ["api", "v1", "repos", r, "snapshots"] => {
                let filter = Filter::of(text)?;
                let (offset, limit) = (number("offset", 0)?, number("limit", usize::MAX)?);
                let repo = self.repo(r)?;
                let snaps = blocking(move || repo.snapshots().map_err(Fail::from)).await?;
                let matching: Vec<&(Id, Brief)> = snaps.iter().filter(|(_, s)| filter.matches(s)).collect();
                let list: Vec<Value> =
                    matching.iter().skip(offset).take(limit).map(|(id, s)| snapshot_json(id, s)).collect();
                Ok(h::json(
                    StatusCode::OK,
                    &json!({"type": "snapshots", "repository": r, "total": matching.len(), "offset": offset,
                            "snapshots": list}),
                ))
            }
            ["api", "v1", "repos", r, "snapshots", id, "entries"] => {
                let (offset, limit) = (number("offset", 0)?, number("limit", PAGE)?.clamp(1, MAX_PAGE));
                let (repo, id2, p) = (self.repo(r)?, id.to_string(), entry_path.clone());
                let page: Page = blocking(move || Ok(repo.list(&id2, &p, offset, limit)?)).await?;
                let entries: Vec<Value> = page.entries.iter().map(|n| entry_json(&entry_path, n)).collect();
                Ok(h::json(
                    StatusCode::OK,
                    &json!({"type": "entries", "total": page.total, "offset": page.offset, "entries": entries}),
                ))
            }
            _ => Err(fail(StatusCode::NOT_FOUND, format!("nothing is served at {path}"))),
        }
    }

    /// Runs `f` on a blocking thread.
    async fn blocking<T: Send + 'static>(
        self: Arc<Self>,
        f: impl FnOnce(&App) -> Result<T, Fail> + Send + 'static,
    ) -> Result<T, Fail> {
        blocking(move || f(&self)).await
    }

    /// The dashboard's jobs, what runs now, recent runs and repositories.
    fn dashboard_data(&self) -> Result<Dashboard, Fail> {
        let state = |e: coffer_agent::state::StateError| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        let (jobs, runs) = match &self.jobs {
            Some(j) => (j.status(jiff::Timestamp::now()).map_err(state)?, j.runs(None, 20).map_err(state)?),
            None => (Vec::new(), Vec::new()),
        };
        let mut repos = Vec::with_capacity(self.repos.len());
        for r in &self.repos {
            let mut v = repo_json(r);
            let last = self.checks(&r.jobs, 5)?.into_iter().find(|c| c.ended.is_some());
            v["last_check"] = last.as_ref().map_or(Value::Null, last_check_json);
            repos.push(v);
        }
        Ok((jobs, self.live_items(), runs, repos))
    }

    /// The newest check runs of `jobs`, newest first.
    fn checks(&self, jobs: &[String], limit: usize) -> Result<Vec<coffer_agent::state::Run>, Fail> {
        let Some(j) = &self.jobs else { return Ok(Vec::new()) };
        let mut all = Vec::new();
        for job in jobs {
            all.extend(
                j.runs_of(job, Kind::Check, limit)
                    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
            );
        }
        all.sort_by_key(|r| std::cmp::Reverse(r.started));
        all.truncate(limit);
        Ok(all)
    }

    /// What runs now: the jobs' runs, then the restores started here.
    fn live_items(&self) -> Vec<Item> {
        let jobs = self.jobs.iter().flat_map(|j| j.live_all()).map(|p| crate::events::job_item(&p));
        jobs.chain(self.restores.running().iter().map(|t| crate::events::restore_item(t))).collect()
    }

    /// A restore asked for by a form or the API: checked, then a dry run
    /// (`run` false) or started.
    async fn restore(&self, r: &str, id: &str, order: RestoreAsk, run: bool) -> Result<Restored, Fail> {
        let overwrite = crate::restores::parse_overwrite(&order.overwrite).ok_or_else(|| {
            fail(
                StatusCode::BAD_REQUEST,
                format!("overwrite {:?} is not refuse, never, if-changed, if-newer or always", order.overwrite),
            )
        })?;
        let (view, id2, p) = (self.repo(r)?, id.to_string(), order.path.clone());
        // A path not in the snapshot is refused before any task starts.
        let (snap_id, snap) = blocking(move || {
            view.entry(&id2, &p)?;
            Ok(view.snapshot(&id2)?)
        })
        .await?;
        let o =
            Order { repo: r.to_string(), snapshot: snap_id, path: order.path, target: order.target.into(), overwrite };
        o.check().map_err(|m| fail(StatusCode::BAD_REQUEST, m))?;
        let repo = self.repo(r)?.repo().map_err(Fail::from)?.clone();
        if !run {
            let o2 = o.clone();
            let outcome = blocking(move || {
                crate::restores::dry_run(&repo, &snap, &o2).map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))
            })
            .await?;
            return Ok(Restored::Preview(o, outcome));
        }
        let task = self
            .restores
            .start(repo, snap, o)
            .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot start the restore: {e}")))?;
        Ok(Restored::Started(task))
    }

    async fn login(
        self: Arc<Self>,
        req: Request<hyper::body::Incoming>,
        client: IpAddr,
        api: bool,
    ) -> Result<Response<Body>, Fail> {
        let body = h::read_body(req.into_body())
            .await
            .map_err(|_| fail(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large or broken"))?;
        let secret: zeroize::Zeroizing<Vec<u8>> = zeroize::Zeroizing::new(if api {
            let v: Value = serde_json::from_slice(&body)
                .map_err(|_| fail(StatusCode::BAD_REQUEST, "the body is not JSON: {\"secret\": \"…\"}"))?;
            v["secret"].as_str().unwrap_or_default().as_bytes().to_vec()
        } else {
            h::decode_pairs(&body).remove("secret").unwrap_or_default()
        });
        let delay = self.gate.delay(client, Instant::now());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let Some(opened) = self.gate.login(client, &secret, Instant::now()) else {
            let msg = "wrong password or login token";
            return Ok(if api {
                h::json_error(StatusCode::UNAUTHORIZED, msg)
            } else {
                h::html(StatusCode::UNAUTHORIZED, pages::login(Some(msg)))
            });
        };
        if opened.used_token {
            (self.on_token)(&self.gate.token());
        }
        let mut r = if api {
            h::json(StatusCode::OK, &json!({"type": "session", "csrf": opened.csrf}))
        } else {
            h::see_other("/")
        };
        r.headers_mut().insert(header::SET_COOKIE, self.session_cookie(&opened.id, None));
        Ok(r)
    }

    async fn post(
        self: Arc<Self>,
        segs: &[&str],
        session: &Session,
        body: &[u8],
        form: &std::collections::HashMap<String, Vec<u8>>,
    ) -> Result<Response<Body>, Fail> {
        match segs {
            ["logout"] | ["api", "v1", "logout"] => {
                self.gate.logout(&session.id);
                let mut r = if segs[0] == "api" {
                    h::json(StatusCode::OK, &json!({"type": "logout"}))
                } else {
                    h::see_other("/login")
                };
                r.headers_mut().insert(header::SET_COOKIE, self.session_cookie("", Some(0)));
                Ok(r)
            }
            ["jobs", job, "run"] | ["api", "v1", "jobs", job, "run"] => {
                let api = segs[0] == "api";
                let kind = if api {
                    let v: Value = if body.is_empty() {
                        json!({})
                    } else {
                        serde_json::from_slice(body)
                            .map_err(|_| fail(StatusCode::BAD_REQUEST, "the body is not JSON"))?
                    };
                    v["kind"].as_str().unwrap_or("backup").to_string()
                } else {
                    form.get("kind").map(|k| String::from_utf8_lossy(k).into_owned()).unwrap_or_else(|| "backup".into())
                };
                let kind = Kind::parse(&kind)
                    .ok_or_else(|| fail(StatusCode::BAD_REQUEST, format!("{kind:?} is not backup, prune or check")))?;
                let jobs = self.jobs()?;
                let name = job.to_string();
                blocking(move || {
                    jobs.start(&name, kind).map_err(|e| {
                        let status = match e {
                            StartError::NoJob(_) => StatusCode::NOT_FOUND,
                            StartError::Busy(_) => StatusCode::CONFLICT,
                            StartError::State(_) | StartError::Spawn(_) => StatusCode::INTERNAL_SERVER_ERROR,
                        };
                        fail(status, e.to_string())
                    })
                })
                .await?;
                Ok(if api {
                    h::json(StatusCode::ACCEPTED, &json!({"type": "started", "job": job, "kind": kind.as_str()}))
                } else {
                    h::see_other("/")
                })
            }
            ["repos", r, "forget"] => {
                let ids = form.get("snapshots").map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
                let view = self.repo(r)?;
                let (forgotten, tombstone) = blocking(move || {
                    let p = plan(&view, false, &ids)?;
                    let ids: Vec<Id> = p.forget.iter().map(|(i, _)| *i).collect();
                    let t = view.forget(&ids)?;
                    Ok((ids, t))
                })
                .await?;
                Ok(h::html(StatusCode::OK, pages::forget::done(&session.csrf, r, &forgotten, &tombstone)))
            }
            ["api", "v1", "repos", r, "forget"] => {
                let v: Value =
                    serde_json::from_slice(body).map_err(|_| fail(StatusCode::BAD_REQUEST, "the body is not JSON"))?;
                let policy = v["policy"].as_bool().unwrap_or(false);
                let ids = match &v["snapshots"] {
                    Value::Null => String::new(),
                    Value::Array(a) => {
                        let ids: Option<Vec<&str>> = a.iter().map(Value::as_str).collect();
                        ids.ok_or_else(|| fail(StatusCode::BAD_REQUEST, "snapshots: a list of snapshot ids"))?.join(",")
                    }
                    _ => return Err(fail(StatusCode::BAD_REQUEST, "snapshots: a list of snapshot ids")),
                };
                // Forgetting is done only when asked for in so many words.
                let dry = v["dry_run"].as_bool().unwrap_or(true);
                let view = self.repo(r)?;
                let (p, tombstone) = blocking(move || {
                    let p = plan(&view, policy, &ids)?;
                    let t = if dry || p.forget.is_empty() {
                        None
                    } else {
                        Some(view.forget(&p.forget.iter().map(|(i, _)| *i).collect::<Vec<_>>())?)
                    };
                    Ok((p, t))
                })
                .await?;
                Ok(h::json(StatusCode::OK, &forget_json(&p, dry, tombstone)))
            }
            ["repos", r, "snapshots", id, "restore"] => {
                let text = |k: &str| form.get(k).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
                let ask = RestoreAsk {
                    // The path as the listing gives it: percent-encoded bytes.
                    path: crate::http::decode_value(form.get("path").map_or(&b""[..], |v| v)),
                    target: text("target"),
                    overwrite: Some(text("overwrite")).filter(|o| !o.is_empty()).unwrap_or_else(|| "refuse".into()),
                };
                let run = text("step") == "run";
                let (path, target) = (ask.path.clone(), ask.target.clone());
                match self.restore(r, id, ask, run).await {
                    Ok(Restored::Preview(o, outcome)) => {
                        Ok(h::html(StatusCode::OK, pages::restore::preview(&session.csrf, &o, &outcome)))
                    }
                    Ok(Restored::Started(t)) => Ok(h::see_other(&format!("/restores/{}", t.id))),
                    // A mistake in the form: the form again, saying what is wrong.
                    Err(Fail(status, message)) if status == StatusCode::BAD_REQUEST => {
                        let (view, id2) = (self.repo(r)?, id.to_string());
                        let snap = blocking(move || Ok(view.snapshot(&id2)?)).await?;
                        let page = pages::restore::form(&session.csrf, r, &snap, &path, &target, Some(&message));
                        Ok(h::html(StatusCode::BAD_REQUEST, page))
                    }
                    Err(e) => Err(e),
                }
            }
            ["api", "v1", "repos", r, "snapshots", id, "restore"] => {
                let v: Value = serde_json::from_slice(body).map_err(|_| {
                    fail(StatusCode::BAD_REQUEST, "the body is not JSON: {\"target\": \"/path\", \"path\": \"dir\", …}")
                })?;
                let s = |k: &str| v[k].as_str().map(str::to_string);
                let ask = RestoreAsk {
                    path: crate::http::decode_value(s("path").unwrap_or_default().as_bytes()),
                    target: s("target")
                        .ok_or_else(|| fail(StatusCode::BAD_REQUEST, "give the target: an absolute path"))?,
                    overwrite: s("overwrite").unwrap_or_else(|| "refuse".into()),
                };
                let dry = v["dry_run"].as_bool().unwrap_or(false);
                Ok(match self.restore(r, id, ask, !dry).await? {
                    Restored::Preview(_, o) => {
                        let mut d = o.to_json();
                        d["type"] = json!("dry_run");
                        h::json(StatusCode::OK, &d)
                    }
                    Restored::Started(t) => h::json(StatusCode::ACCEPTED, &t.to_json()),
                })
            }
            _ => Err(fail(StatusCode::NOT_FOUND, "nothing is served here")),
        }
    }
}

/// A restore as a form or the API asks for it, not checked yet.
struct RestoreAsk {
    path: Vec<u8>,
    target: String,
    overwrite: String,
}

/// What [`App::restore`] did.
enum Restored {
    Preview(Order, crate::restores::Outcome),
    Started(Arc<crate::restores::Task>),
}

/// The snapshot filter of a page or API call: each given field must match.
/// `since` and `until` bound the backup's time, each a day (`2026-12-01`,
/// the whole day in UTC) or an RFC 3339 time.
#[derive(Default)]
pub struct Filter {
    pub host: Option<String>,
    pub tag: Option<String>,
    pub path: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// `since` and `until` as read: the first instant taken, the first one not.
    bounds: (Option<jiff::Timestamp>, Option<jiff::Timestamp>),
}

impl Filter {
    /// The filter of a query; a time bound that does not read is refused, naming it.
    fn of(text: impl Fn(&str) -> Option<String>) -> Result<Filter, Fail> {
        let (since, until) = (text("since").filter(|v| !v.is_empty()), text("until").filter(|v| !v.is_empty()));
        let bound = |k: &str, v: &Option<String>, end: bool| -> Result<Option<jiff::Timestamp>, Fail> {
            v.as_deref().map(|v| time_bound(v, end)).transpose().map_err(|()| {
                fail(
                    StatusCode::BAD_REQUEST,
                    format!("{k}={v:?} is neither a day (2026-12-01) nor an RFC 3339 time (2026-12-01T08:00:00Z)"),
                )
            })
        };
        let bounds = (bound("since", &since, false)?, bound("until", &until, true)?);
        Ok(Filter { host: text("host"), tag: text("tag"), path: text("path"), since, until, bounds })
    }

    fn matches(&self, s: &Brief) -> bool {
        fn some(f: &Option<String>) -> Option<&str> {
            f.as_deref().filter(|v| !v.is_empty())
        }
        let in_time = || match self.bounds {
            (None, None) => true,
            (since, until) => s
                .time
                .parse::<jiff::Timestamp>()
                .is_ok_and(|t| since.is_none_or(|b| t >= b) && until.is_none_or(|b| t < b)),
        };
        some(&self.host).is_none_or(|h| &*s.hostname == h)
            && some(&self.tag).is_none_or(|t| s.tags.iter().any(|x| x == t))
            && some(&self.path).is_none_or(|p| s.paths.iter().any(|x| x == p))
            && in_time()
    }

    /// The query string that gives this filter again (for links between pages).
    pub fn query(&self) -> String {
        let fields = [
            ("host", &self.host),
            ("tag", &self.tag),
            ("path", &self.path),
            ("since", &self.since),
            ("until", &self.until),
        ];
        fields
            .iter()
            .filter_map(|(k, v)| {
                v.as_deref()
                    .filter(|v| !v.is_empty())
                    .map(|v| format!("{k}={}", crate::http::encode_query(v.as_bytes())))
            })
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// A time bound of a filter: a day (its start, or with `end` the next day's
/// start) or an RFC 3339 time (with `end`, the instant after it).
fn time_bound(v: &str, end: bool) -> Result<jiff::Timestamp, ()> {
    if let Ok(day) = v.parse::<jiff::civil::Date>() {
        let day = if end { day.tomorrow().map_err(|_| ())? } else { day };
        return day.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()).map_err(|_| ());
    }
    let t: jiff::Timestamp = v.parse().map_err(|_| ())?;
    if end { t.checked_add(jiff::SignedDuration::from_nanos(1)).map_err(|_| ()) } else { Ok(t) }
}

/// A time of the trees (seconds, nanoseconds) as RFC 3339.
pub fn tree_time(secs: i64, nanos: u32) -> String {
    jiff::Timestamp::new(secs, nanos as i32).map(|t| t.to_string()).unwrap_or_default()
}

pub fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::File => "file",
        NodeKind::Dir => "dir",
        NodeKind::Symlink => "symlink",
        NodeKind::Fifo => "fifo",
        NodeKind::Chardev => "chardev",
        NodeKind::Blockdev => "blockdev",
        NodeKind::Socket => "socket",
    }
}

/// The path of `n` below the directory `dir` (both relative to the root).
pub fn child_path(dir: &[u8], n: &Node) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(&n.name.0);
    p
}

fn entry_json(dir: &[u8], n: &Node) -> Value {
    json!({
        "name": n.name,
        "path": h::encode_query(&child_path(dir, n)),
        "kind": kind_name(n.kind),
        "size": n.size,
        "mode": n.mode,
        "mtime": tree_time(n.mtime.0, n.mtime.1),
        "user": n.user,
        "group": n.group,
        "target": n.target.as_ref().map(|t| String::from_utf8_lossy(&t.0).into_owned()),
    })
}

fn diff_json(d: &crate::repos::Compared) -> Value {
    let st = &d.stats;
    let changes: Vec<Value> = d
        .changes
        .iter()
        .map(|c| {
            json!({"path": coffer_core::format::bytes::Bytes(c.path.clone()), "change": c.kind.as_str(),
                   "kind": kind_name(c.node_kind), "fields": c.fields.iter().map(|f| f.as_str()).collect::<Vec<_>>()})
        })
        .collect();
    json!({"type": "diff", "from": d.from.0, "to": d.to.0, "changes": changes, "truncated": d.truncated,
           "stats": {"added": st.added, "removed": st.removed, "modified": st.modified,
                     "type_changed": st.type_changed, "metadata_only": st.metadata_only,
                     "bytes_added": st.bytes_added, "bytes_removed": st.bytes_removed}})
}

fn snapshot_json(id: &Id, s: &Brief) -> Value {
    json!({"id": id, "time": s.time, "hostname": &*s.hostname, "username": &*s.username, "paths": &s.paths[..],
           "tags": &s.tags[..], "summary": s.summary, "signature_valid": s.signature_valid})
}

fn repo_json(r: &RepoView) -> Value {
    match r.snapshots() {
        Ok(snaps) => {
            let mut hosts: std::collections::BTreeMap<&str, u64> = Default::default();
            for (_, s) in snaps.iter() {
                *hosts.entry(&*s.hostname).or_default() += 1;
            }
            let latest =
                snaps.iter().max_by(|a, b| a.1.time.cmp(&b.1.time)).map(|(id, s)| json!({"id": id, "time": s.time}));
            // What the snapshots hold against what the packs store (from the index,
            // no tree read): the deduplication and compression ratio together.
            let logical: u64 = snaps.iter().map(|(_, s)| s.summary.bytes_total).sum();
            let stored: Option<u64> =
                r.repo().ok().map(|repo| repo.index().iter().map(|e| u64::from(e.entry.length)).sum());
            let ratio = stored.filter(|&b| b > 0).map(|b| logical as f64 / b as f64);
            json!({"name": r.name, "location": r.location, "snapshots": snaps.len(), "hosts": hosts, "latest": latest,
                   "logical_bytes": logical, "stored_bytes": stored, "ratio": ratio})
        }
        Err(e) => json!({"name": r.name, "location": r.location, "error": e.to_string()}),
    }
}

/// The newest ended check: when, how, and how long ago.
fn last_check_json(r: &coffer_agent::state::Run) -> Value {
    let ended = r.ended.unwrap_or(r.started);
    let age = jiff::Timestamp::now().duration_since(ended).as_secs().max(0);
    json!({"job": r.job, "ended": ended.to_string(), "outcome": r.outcome.as_str(), "age_seconds": age})
}

/// A repository's health for the API.
fn health_json(s: &pages::health::Shown<'_>) -> Value {
    let log = s.server_log.map_or(Value::Null, |l| match l {
        Ok(l) => json!({"ok": l.problems.is_empty(), "entries": l.entries, "key": l.key,
                        "new_entries": l.new_entries, "pinned_now": l.first_contact, "problems": l.problems}),
        Err(e) => json!({"ok": false, "error": e}),
    });
    let bench = s.bench.map_or(Value::Null, |b| match b {
        Ok(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Err(e) => json!({"error": e}),
    });
    let replicas = s.replicas.map_or(Value::Null, |r| match r {
        Ok(r) => {
            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
            v["ok"] = Value::Bool(r.is_whole());
            v
        }
        Err(e) => json!({"ok": false, "error": e}),
    });
    let last = s.checks.iter().find(|c| c.ended.is_some()).map_or(Value::Null, last_check_json);
    let checks: Vec<Value> = s.checks.iter().map(pages::run_json).collect();
    json!({"type": "health", "repository": s.repo, "jobs": s.jobs, "checks": checks, "last_check": last,
           "replicas": replicas, "server_log": log, "bench": bench})
}

/// What a forget would do: by the policy, or of the snapshots `ids` (comma-separated).
fn plan(view: &RepoView, policy: bool, ids: &str) -> Result<crate::forgets::Plan, ViewError> {
    if policy {
        return view.plan_policy();
    }
    view.plan_snapshots(&ids.split(',').map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>())
}

/// A forget's plan, or what it did, for the API.
fn forget_json(p: &crate::forgets::Plan, dry_run: bool, tombstone: Option<Id>) -> Value {
    let decisions = p.policy.as_ref().map(|a| {
        let list: Vec<Value> = a
            .decisions
            .iter()
            .map(|d| {
                let reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
                json!({"id": d.id, "group": d.group.to_string(), "action": if d.keep { "keep" } else { "forget" },
                       "reasons": reasons})
            })
            .collect();
        json!({"job": a.job, "decisions": list})
    });
    let forgotten: Vec<Id> = p.forget.iter().map(|(i, _)| *i).collect();
    json!({"type": "forget", "dry_run": dry_run, "forgotten": forgotten, "kept": p.kept,
           "tombstone": tombstone, "policy": decisions})
}

/// A file's preview for the API.
fn preview_json(path: &[u8], node: &Node, p: &Preview) -> Value {
    let mut v = json!({"type": "preview", "path": h::encode_query(path), "size": node.size});
    match p {
        Preview::Text { text, truncated } => {
            v["kind"] = json!("text");
            v["text"] = json!(text);
            v["truncated"] = json!(truncated);
        }
        Preview::Image(media) => {
            v["kind"] = json!("image");
            v["media_type"] = json!(media);
        }
        Preview::Binary => v["kind"] = json!("binary"),
    }
    v
}

/// The text of a page's link to `path` in a snapshot.
pub fn shown_path(path: &[u8]) -> String {
    esc(&String::from_utf8_lossy(path))
}
