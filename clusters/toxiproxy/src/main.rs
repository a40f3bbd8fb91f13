//! A Toxiproxy server for the harness's connection faults: Toxiproxy's HTTP API (proxies,
//! toxics, enable and disable, reset), so that `toxiproxy-python` and any other Toxiproxy
//! client drive it unchanged, over the proxies and toxics of the `noxious` library (a Rust port
//! of Toxiproxy whose own server is not published). What noxious does, it does: this file
//! keeps the registry of proxies and speaks the API, and adds the one toxic noxious 1.0.4
//! lacks, `reset_peer` (see `Resetter`).
//!
//! Usage: harness-toxiproxy [--host 127.0.0.1] [--port 8474]

use std::{
    collections::BTreeMap,
    net::{SocketAddr, TcpListener as StdListener},
    sync::Arc,
};

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use noxious::{
    proxy::{ProxyConfig, ProxyRunner, Runner, Toxics},
    signal::{Close, Stop, Stopper},
    socket::TcpListener,
    toxic::{StreamDirection, Toxic, ToxicEvent, ToxicEventKind, ToxicEventResult},
};
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

/// The Toxiproxy version whose API this server speaks.
const VERSION: &str = "2.1.4";

/// A proxy that listens: the channel its runner takes toxic changes on, and its stop signals.
struct Running {
    events: bmrng::RequestSender<ToxicEvent, ToxicEventResult>,
    stopper: Stopper,
    closed: Close,
}

/// A proxy as the API knows it; its toxics are kept here too, so a disabled proxy keeps them.
/// While it has a `reset_peer` toxic, the resetter listens in the runner's place.
struct Entry {
    config: ProxyConfig,
    toxics: Vec<Toxic>,
    reset_peer: Option<ResetPeer>,
    running: Option<Running>,
    resetter: Option<Resetter>,
}

/// Toxiproxy's `reset_peer`: a connection is reset (TCP RST, "connection reset by peer") once
/// it has lived `timeout` ms (at once for 0), its data forwarded until then.
#[derive(Clone)]
struct ResetPeer {
    name: String,
    stream: String,
    toxicity: f64,
    timeout: u64,
}

impl ResetPeer {
    fn json(&self) -> Value {
        json!({"name": self.name, "type": "reset_peer", "stream": self.stream,
               "toxicity": self.toxicity, "attributes": {"timeout": self.timeout}})
    }
}

/// Listens on a proxy's address in the noxious runner's place while the proxy has a
/// `reset_peer` toxic: noxious has none, and the sockets of its runner's connections are its
/// own, so the runner is stopped (its open connections closed) and every connection made
/// meanwhile is reset after the toxic's timeout, its bytes forwarded to the upstream until then.
struct Resetter {
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl Resetter {
    async fn start(config: &ProxyConfig, toxic: &ResetPeer) -> Result<Resetter, ApiError> {
        let listener = tokio::net::TcpListener::bind(&config.listen).await.map_err(|e| {
            ApiError(StatusCode::CONFLICT, format!("cannot listen on {}: {e}", config.listen))
        })?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let upstream = config.upstream.clone();
        let after = std::time::Duration::from_millis(toxic.timeout);
        let done = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopped.changed() => return,
                };
                let Ok((client, _)) = accepted else { continue };
                let upstream = upstream.clone();
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let mut client = client;
                    if !after.is_zero() {
                        if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                            let forward = tokio::io::copy_bidirectional(&mut client, &mut server);
                            tokio::select! {
                                _ = forward => {},
                                _ = tokio::time::sleep(after) => {},
                                _ = stopped.changed() => {},
                            }
                        }
                    }
                    // a zero linger makes the close a reset
                    let _ = client.set_zero_linger();
                    drop(client);
                });
            }
        });
        Ok(Resetter { stop, done })
    }

    async fn halt(self) {
        let _ = self.stop.send(true);
        let _ = self.done.await;
    }
}

type Proxies = Arc<Mutex<BTreeMap<String, Entry>>>;

/// An API error: Toxiproxy's status codes (404 unknown, 409 exists, 400 bad request) and a body
/// that says what is wrong.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.1, "status": self.0.as_u16()});
        (self.0, Json(body)).into_response()
    }
}

type Answer = Result<Response, ApiError>;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

fn no_proxy(name: &str) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, format!("proxy not found: {name}"))
}

fn no_toxic(name: &str) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, format!("toxic not found: {name}"))
}

/// A toxic as Toxiproxy shows it: `stream`, where noxious says `direction`.
fn toxic_json(toxic: &Toxic) -> Value {
    let mut value = serde_json::to_value(toxic).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        if let Some(direction) = object.remove("direction") {
            object.insert("stream".into(), direction);
        }
        object.entry("attributes").or_insert_with(|| json!({}));
    }
    value
}

fn proxy_json(entry: &Entry) -> Value {
    json!({
        "name": entry.config.name,
        "listen": entry.config.listen,
        "upstream": entry.config.upstream,
        "enabled": entry.running.is_some() || entry.resetter.is_some(),
        "toxics": toxics_json(entry),
    })
}

fn toxics_json(entry: &Entry) -> Vec<Value> {
    let mut shown: Vec<Value> = entry.toxics.iter().map(toxic_json).collect();
    shown.extend(entry.reset_peer.iter().map(ResetPeer::json));
    shown
}

/// The proxy listening as its toxics have it: noxious's runner, or the resetter while it has a
/// `reset_peer` toxic.
async fn listen(entry: &mut Entry) -> Result<(), ApiError> {
    match &entry.reset_peer {
        Some(toxic) => entry.resetter = Some(Resetter::start(&entry.config, toxic).await?),
        None => entry.running = Some(start(&entry.config, &entry.toxics).await?),
    }
    Ok(())
}

/// The proxy not listening, its connections closed.
async fn silence(entry: &mut Entry) {
    if let Some(running) = entry.running.take() {
        halt(running).await;
    }
    if let Some(resetter) = entry.resetter.take() {
        resetter.halt().await;
    }
}

fn enabled(entry: &Entry) -> bool {
    entry.running.is_some() || entry.resetter.is_some()
}

fn split(toxics: &[Toxic]) -> Toxics {
    let (upstream, downstream) =
        toxics.iter().cloned().partition(|t| t.direction == StreamDirection::Upstream);
    Toxics { upstream, downstream }
}

/// `host:0` becomes a free port now, so that the proxy's address can be reported (noxious binds
/// the address it is given and does not say which port the system chose).
fn resolve_listen(listen: &str) -> Result<String, ApiError> {
    let address: SocketAddr = listen
        .parse()
        .map_err(|_| bad(format!("listen address {listen:?} is not host:port")))?;
    if address.port() != 0 {
        return Ok(listen.to_string());
    }
    let probe = StdListener::bind(address)
        .map_err(|e| bad(format!("cannot listen on {listen}: {e}")))?;
    let port = probe.local_addr().map_err(|e| bad(e.to_string()))?.port();
    Ok(SocketAddr::new(address.ip(), port).to_string())
}

async fn start(config: &ProxyConfig, toxics: &[Toxic]) -> Result<Running, ApiError> {
    let (listener, info) =
        ProxyRunner::initialize_proxy::<TcpListener>(config.clone(), split(toxics))
            .await
            .map_err(|e| {
                ApiError(
                    StatusCode::CONFLICT,
                    format!("cannot listen on {}: {e}", config.listen),
                )
            })?;
    let (events, receiver) = bmrng::channel(8);
    let (stop, stopper) = Stop::new();
    let (closed, closer) = Close::new();
    tokio::spawn(ProxyRunner::run_proxy(listener, info, receiver, stop, closer));
    Ok(Running { events, stopper, closed })
}

/// Stop listening and drop every connection; returns once the listener is closed.
async fn halt(running: Running) {
    running.stopper.stop();
    let _ = running.closed.recv().await;
}

async fn tell(entry: &Entry, kind: ToxicEventKind) -> Result<(), ApiError> {
    if let Some(running) = &entry.running {
        let event = ToxicEvent::new(entry.config.name.clone(), kind);
        match running.events.send_receive(event).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(bad(format!("the proxy refused the change: {e}"))),
            Err(_) => {
                return Err(ApiError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the proxy's runner has stopped".into(),
                ))
            }
        }
    }
    Ok(())
}

async fn version() -> &'static str {
    VERSION
}

async fn list_proxies(State(proxies): State<Proxies>) -> Json<Value> {
    let proxies = proxies.lock().await;
    Json(Value::Object(
        proxies.iter().map(|(name, entry)| (name.clone(), proxy_json(entry))).collect(),
    ))
}

async fn create_proxy(State(proxies): State<Proxies>, Json(body): Json<Value>) -> Answer {
    let mut config: ProxyConfig = serde_json::from_value(body.clone())
        .map_err(|e| bad(format!("a proxy needs name, listen and upstream: {e}")))?;
    config.validate().map_err(|e| bad(e.to_string()))?;
    let mut proxies = proxies.lock().await;
    if proxies.contains_key(&config.name) {
        return Err(ApiError(StatusCode::CONFLICT, format!("proxy already exists: {}", config.name)));
    }
    config.listen = resolve_listen(&config.listen)?;
    let running = if config.enabled { Some(start(&config, &[]).await?) } else { None };
    let entry = Entry { config, toxics: Vec::new(), reset_peer: None, running, resetter: None };
    let shown = proxy_json(&entry);
    proxies.insert(entry.config.name.clone(), entry);
    Ok((StatusCode::CREATED, Json(shown)).into_response())
}

async fn show_proxy(State(proxies): State<Proxies>, Path(name): Path<String>) -> Answer {
    let proxies = proxies.lock().await;
    let entry = proxies.get(&name).ok_or_else(|| no_proxy(&name))?;
    Ok(Json(proxy_json(entry)).into_response())
}

/// Toxiproxy's update: `enabled` starts or stops the proxy; a new `listen` or `upstream` takes
/// effect by restarting it.
async fn update_proxy(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Answer {
    let mut proxies = proxies.lock().await;
    let entry = proxies.get_mut(&name).ok_or_else(|| no_proxy(&name))?;
    let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_string);
    let mut config = entry.config.clone();
    if let Some(listen) = text("listen") {
        config.listen = resolve_listen(&listen)?;
    }
    if let Some(upstream) = text("upstream") {
        config.upstream = upstream;
    }
    let wanted = match body.get("enabled") {
        None => enabled(entry),
        Some(value) => value.as_bool().ok_or_else(|| bad("enabled must be true or false"))?,
    };
    let moved = config != entry.config;
    if !wanted || moved {
        silence(entry).await;
    }
    entry.config = config;
    if wanted && !enabled(entry) {
        listen(entry).await?;
    }
    Ok(Json(proxy_json(entry)).into_response())
}

async fn delete_proxy(State(proxies): State<Proxies>, Path(name): Path<String>) -> Answer {
    let mut entry = proxies.lock().await.remove(&name).ok_or_else(|| no_proxy(&name))?;
    silence(&mut entry).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Every proxy enabled and every toxic removed. Toxics are removed one by one: noxious's
/// remove-all clears only the upstream ones.
async fn reset(State(proxies): State<Proxies>) -> Answer {
    let mut proxies = proxies.lock().await;
    for entry in proxies.values_mut() {
        for toxic in std::mem::take(&mut entry.toxics) {
            tell(entry, ToxicEventKind::RemoveToxic(toxic.name)).await?;
        }
        if entry.reset_peer.take().is_some() {
            silence(entry).await;
        }
        if !enabled(entry) {
            listen(entry).await?;
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_toxics(State(proxies): State<Proxies>, Path(name): Path<String>) -> Answer {
    let proxies = proxies.lock().await;
    let entry = proxies.get(&name).ok_or_else(|| no_proxy(&name))?;
    Ok(Json(toxics_json(entry)).into_response())
}

/// A toxic from Toxiproxy's JSON, or one sentence saying why not (a type noxious lacks, a
/// missing attribute, a toxicity outside [0, 1]).
fn parse_toxic(body: &Value) -> Result<Toxic, ApiError> {
    let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
    let mut toxic: Toxic = serde_json::from_value(body.clone()).map_err(|e| {
        bad(format!(
            "invalid toxic {kind:?}: {e} (this server offers noxious's toxics: latency, \
             bandwidth, slow_close, timeout, slicer, limit_data, noop, and reset_peer)"
        ))
    })?;
    if !(0.0..=1.0).contains(&toxic.toxicity) {
        return Err(bad(format!("toxicity {} is not between 0 and 1", toxic.toxicity)));
    }
    if toxic.name.is_empty() {
        toxic.name = format!("{kind}_{}", toxic.direction);
    }
    Ok(toxic)
}

async fn create_toxic(
    State(proxies): State<Proxies>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Answer {
    if body.get("type").and_then(Value::as_str) == Some("reset_peer") {
        return add_reset_peer(proxies, name, body).await;
    }
    let toxic = parse_toxic(&body)?;
    let mut proxies = proxies.lock().await;
    let entry = proxies.get_mut(&name).ok_or_else(|| no_proxy(&name))?;
    if has_toxic(entry, &toxic.name) {
        return Err(ApiError(StatusCode::CONFLICT, format!("toxic already exists: {}", toxic.name)));
    }
    tell(entry, ToxicEventKind::AddToxic(toxic.clone())).await?;
    let shown = toxic_json(&toxic);
    entry.toxics.push(toxic);
    Ok(Json(shown).into_response())
}

async fn show_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
) -> Answer {
    let proxies = proxies.lock().await;
    let entry = proxies.get(&name).ok_or_else(|| no_proxy(&name))?;
    let found = toxics_json(entry).into_iter().find(|t| t["name"] == toxic.as_str());
    Ok(Json(found.ok_or_else(|| no_toxic(&toxic))?).into_response())
}

/// Toxiproxy's toxic update: the given fields (attributes merged) over the toxic's own; its
/// name, type and stream stay.
async fn update_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Answer {
    let mut proxies = proxies.lock().await;
    let entry = proxies.get_mut(&name).ok_or_else(|| no_proxy(&name))?;
    if let Some(reset_peer) = entry.reset_peer.as_mut().filter(|t| t.name == toxic) {
        if let Some(timeout) = body.get("attributes").and_then(|a| a.get("timeout")) {
            reset_peer.timeout =
                timeout.as_u64().ok_or_else(|| bad("reset_peer's timeout is whole ms"))?;
        }
        let shown = reset_peer.json();
        if enabled(entry) {
            silence(entry).await;
            listen(entry).await?;
        }
        return Ok(Json(shown).into_response());
    }
    let at = entry.toxics.iter().position(|t| t.name == toxic).ok_or_else(|| no_toxic(&toxic))?;
    let mut merged = toxic_json(&entry.toxics[at]);
    if let Some(toxicity) = body.get("toxicity") {
        merged["toxicity"] = toxicity.clone();
    }
    if let Some(Value::Object(given)) = body.get("attributes") {
        let attributes = merged["attributes"].as_object_mut().map(std::mem::take);
        let mut attributes: Map<String, Value> = attributes.unwrap_or_default();
        attributes.extend(given.clone());
        merged["attributes"] = Value::Object(attributes);
    }
    let updated = parse_toxic(&merged)?;
    tell(entry, ToxicEventKind::UpdateToxic(updated.clone())).await?;
    let shown = toxic_json(&updated);
    entry.toxics[at] = updated;
    Ok(Json(shown).into_response())
}

async fn delete_toxic(
    State(proxies): State<Proxies>,
    Path((name, toxic)): Path<(String, String)>,
) -> Answer {
    let mut proxies = proxies.lock().await;
    let entry = proxies.get_mut(&name).ok_or_else(|| no_proxy(&name))?;
    if entry.reset_peer.as_ref().is_some_and(|t| t.name == toxic) {
        entry.reset_peer = None;
        let was = enabled(entry);
        silence(entry).await;
        if was {
            listen(entry).await?;
        }
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let at = entry.toxics.iter().position(|t| t.name == toxic).ok_or_else(|| no_toxic(&toxic))?;
    tell(entry, ToxicEventKind::RemoveToxic(toxic)).await?;
    entry.toxics.remove(at);
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn has_toxic(entry: &Entry, name: &str) -> bool {
    entry.toxics.iter().any(|t| t.name == name)
        || entry.reset_peer.as_ref().is_some_and(|t| t.name == name)
}

/// `reset_peer`, which noxious lacks: the proxy's listener handed to a `Resetter` (its open
/// connections closed) until the toxic is removed.
async fn add_reset_peer(proxies: Proxies, name: String, body: Value) -> Answer {
    let stream = body.get("stream").and_then(Value::as_str).unwrap_or("downstream").to_string();
    if stream != "upstream" && stream != "downstream" {
        return Err(bad(format!("stream {stream:?} is neither upstream nor downstream")));
    }
    let toxicity = body.get("toxicity").and_then(Value::as_f64).unwrap_or(1.0);
    if toxicity != 1.0 {
        return Err(bad("reset_peer here resets every connection: toxicity must be 1"));
    }
    let attributes = body.get("attributes").cloned().unwrap_or_else(|| json!({}));
    let timeout = match attributes.get("timeout") {
        None => 0,
        Some(value) => value.as_u64().ok_or_else(|| bad("reset_peer's timeout is whole ms"))?,
    };
    let given = body.get("name").and_then(Value::as_str).unwrap_or("");
    let toxic_name =
        if given.is_empty() { format!("reset_peer_{stream}") } else { given.to_string() };
    let mut proxies = proxies.lock().await;
    let entry = proxies.get_mut(&name).ok_or_else(|| no_proxy(&name))?;
    if has_toxic(entry, &toxic_name) || entry.reset_peer.is_some() {
        return Err(ApiError(StatusCode::CONFLICT, format!("toxic already exists: {toxic_name}")));
    }
    let toxic = ResetPeer { name: toxic_name, stream, toxicity, timeout };
    let shown = toxic.json();
    entry.reset_peer = Some(toxic);
    if enabled(entry) {
        silence(entry).await;
        listen(entry).await?;
    }
    Ok(Json(shown).into_response())
}

fn address() -> Result<SocketAddr, String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = "8474".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--host" => host = value,
            "--port" => port = value,
            _ => return Err(format!("unknown option {flag}: use --host ADDRESS --port PORT")),
        }
    }
    format!("{host}:{port}").parse().map_err(|_| format!("{host}:{port} is not an address"))
}

#[tokio::main]
async fn main() {
    let address = match address() {
        Ok(address) => address,
        Err(message) => {
            eprintln!("harness-toxiproxy: {message}");
            std::process::exit(254);
        }
    };
    let proxies: Proxies = Arc::default();
    let app = Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/proxies", get(list_proxies).post(create_proxy))
        .route("/proxies/:proxy", get(show_proxy).post(update_proxy).delete(delete_proxy))
        .route("/proxies/:proxy/toxics", get(list_toxics).post(create_toxic))
        .route(
            "/proxies/:proxy/toxics/:toxic",
            get(show_toxic).post(update_toxic).delete(delete_toxic),
        )
        .with_state(proxies);
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("harness-toxiproxy: cannot listen on {address}: {e}");
            std::process::exit(1);
        }
    };
    println!("harness-toxiproxy {VERSION} API listening on {address}");
    let stopped = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
        eprintln!("harness-toxiproxy: {e}");
        std::process::exit(1);
    }
}
