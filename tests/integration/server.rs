//! The listener over real sockets: TLS (HTTP/1.1 and HTTP/2 by ALPN),
//! mutual TLS, certificate reload, and the time limits on every phase a
//! client controls. Short timeouts keep each test under a few seconds.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opshooks::http::{self, Limits, ServeOptions, tls};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::support::{root, state};

/// A CA and what it signed, as PEM.
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki(name: &str) -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let leaf = |san: &str, purpose| {
        let mut params = CertificateParams::new(vec![san.to_string()]).unwrap();
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        server: leaf("localhost", rcgen::ExtendedKeyUsagePurpose::ServerAuth),
        client: leaf("metacontroller", rcgen::ExtendedKeyUsagePurpose::ClientAuth),
        ca: ca.pem(),
    }
}

/// The server's TLS from `pki`'s server pair written into `dir` (and its
/// CA as the client CA, for mutual TLS).
fn served_tls(dir: &Path, pki: &Pki, client_auth: bool) -> Arc<tls::Tls> {
    let files = tls::TlsFiles {
        cert: write(dir, "tls.crt", &pki.server.0),
        key: write(dir, "tls.key", &pki.server.1),
        client_ca: client_auth.then(|| write(dir, "ca.crt", &pki.ca)),
    };
    Arc::new(tls::load(&files).unwrap())
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(options: ServeOptions) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(http::serve(
            listener,
            state(Limits::default()),
            async {
                let _ = stopped.await;
            },
            options,
        ));
        Server {
            address,
            stop: Some(stop),
            task,
        }
    }

    /// Asks for shutdown and returns how long the server took to stop.
    async fn stop(mut self) -> Duration {
        let started = Instant::now();
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
        started.elapsed()
    }
}

fn client_config(
    ca_pem: &str,
    identity: Option<&(String, String)>,
    alpn: &[u8],
) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

async fn tls_connect(
    address: SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(address).await?;
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Sends one HTTP/1.1 request with `Connection: close` and reads the whole
/// answer.
async fn exchange(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    path: &str,
    body: &[u8],
) -> String {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    String::from_utf8_lossy(&reply).into_owned()
}

fn request() -> Vec<u8> {
    std::fs::read(root().join("tests/fixtures/webserver/v1-first-sync/request.json")).unwrap()
}

/// How long until the server closes a connection after `payload`.
async fn held_open(address: SocketAddr, payload: &[u8]) -> Duration {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let started = Instant::now();
    stream.write_all(payload).await.unwrap();
    let mut sink = vec![0; 4096];
    let read_all = async { while stream.read(&mut sink).await.map(|n| n > 0).unwrap_or(false) {} };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("the server closes the connection");
    started.elapsed()
}

#[tokio::test]
async fn https_answers_over_http1_and_negotiates_http2() {
    let ours = pki("https");
    let dir = tempfile::tempdir().unwrap();
    let tls = served_tls(dir.path(), &ours, false);
    let server = Server::start(ServeOptions {
        tls: Some(tls),
        ..ServeOptions::default()
    })
    .await;
    let stream = tls_connect(server.address, client_config(&ours.ca, None, b"http/1.1"))
        .await
        .unwrap();
    let reply = exchange(stream, "/webserver/sync", &request()).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(reply.contains(r#""children""#), "{reply}");
    let h2 = tls_connect(server.address, client_config(&ours.ca, None, b"h2"))
        .await
        .unwrap();
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    drop(h2);
    // Plain HTTP on the TLS port gets no answer.
    let plain = exchange(
        TcpStream::connect(server.address).await.unwrap(),
        "/webserver/sync",
        b"{}",
    )
    .await;
    assert!(!plain.contains("HTTP/1.1 200"), "{plain}");
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    let ours = pki("mtls");
    let stranger = pki("stranger");
    let dir = tempfile::tempdir().unwrap();
    let tls = served_tls(dir.path(), &ours, true);
    let server = Server::start(ServeOptions {
        tls: Some(tls),
        ..ServeOptions::default()
    })
    .await;
    let good = tls_connect(
        server.address,
        client_config(&ours.ca, Some(&ours.client), b"http/1.1"),
    )
    .await
    .unwrap();
    let reply = exchange(good, "/webserver/sync", &request()).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    // TLS 1.3 reports the server's refusal of the client's certificate on
    // the first read, so a refused client never gets an HTTP answer.
    for identity in [None, Some(&stranger.client)] {
        let answer = match tls_connect(
            server.address,
            client_config(&ours.ca, identity, b"http/1.1"),
        )
        .await
        {
            Err(_) => String::new(),
            Ok(stream) => exchange(stream, "/webserver/sync", &request()).await,
        };
        assert_eq!(
            answer, "",
            "a client without a trusted certificate got an answer"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_after_the_reload() {
    let (first, second) = (pki("first"), pki("second"));
    let dir = tempfile::tempdir().unwrap();
    let tls = served_tls(dir.path(), &first, false);
    let server = Server::start(ServeOptions {
        tls: Some(Arc::clone(&tls)),
        ..ServeOptions::default()
    })
    .await;
    let trusts = |ca: &str| client_config(ca, None, b"http/1.1");
    assert!(tls_connect(server.address, trusts(&first.ca)).await.is_ok());
    // cert-manager writes the new pair; the reload thread calls refresh.
    write(dir.path(), "tls.crt", &second.server.0);
    write(dir.path(), "tls.key", &second.server.1);
    assert_eq!(tls.refresh(), Ok(true));
    assert!(
        tls_connect(server.address, trusts(&first.ca))
            .await
            .is_err()
    );
    let stream = tls_connect(server.address, trusts(&second.ca))
        .await
        .unwrap();
    let reply = exchange(stream, "/webserver/sync", &request()).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    server.stop().await;
}

fn quick() -> ServeOptions {
    ServeOptions {
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(800),
        grace: Duration::from_secs(5),
        ..ServeOptions::default()
    }
}

/// The hostile cases of issue 10: headers that never end, a connection that
/// sends nothing, an idle keep-alive connection. Each is closed within its
/// timeout (plus the 250 ms the idle check ticks at).
#[tokio::test]
async fn slow_and_idle_connections_are_closed_on_time() {
    let server = Server::start(quick()).await;
    let half_head = held_open(
        server.address,
        b"POST /webserver/sync HTTP/1.1\r\nHost: x\r\n",
    )
    .await;
    assert!(half_head < Duration::from_millis(1500), "{half_head:?}");
    let silent = held_open(server.address, b"").await;
    assert!(silent < Duration::from_millis(1500), "{silent:?}");
    let idle = held_open(server.address, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(idle < Duration::from_millis(1500), "{idle:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_slow_tls_handshake_is_cut_at_the_header_timeout() {
    let slow = pki("slow");
    let dir = tempfile::tempdir().unwrap();
    let tls = served_tls(dir.path(), &slow, false);
    let server = Server::start(ServeOptions {
        tls: Some(tls),
        idle_timeout: Duration::from_secs(30),
        ..quick()
    })
    .await;
    // A ClientHello record header promising more bytes than ever come.
    let open = held_open(server.address, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await;
    assert!(open < Duration::from_millis(1500), "{open:?}");
    server.stop().await;
}

/// Shutdown closes what has nothing in flight at once: it never waits on an
/// idle connection or on one whose headers never finished.
#[tokio::test]
async fn shutdown_does_not_wait_on_idle_or_half_sent_connections() {
    let server = Server::start(ServeOptions {
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        ..quick()
    })
    .await;
    let mut half = TcpStream::connect(server.address).await.unwrap();
    half.write_all(b"POST /webserver/sync HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(server.address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0; 256];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    let took = server.stop().await;
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
}

/// Sends `request` on a fresh connection and reads until the server closes it.
async fn raw_exchange(address: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    String::from_utf8_lossy(&reply).into_owned()
}

/// Issue 18: refusals made before a route is known (hyper's own 400 and
/// 431, the router's 404 and 405) were missing from `/metrics`. Each
/// request here closes its connection before the next one, and the test
/// runtime has one thread, so a count is in before `/metrics` is asked.
#[tokio::test]
async fn refusals_before_a_route_is_known_are_counted() {
    let server = Server::start(quick()).await;
    let many_headers: String = (0..200).map(|i| format!("X-Header-{i}: x\r\n")).collect();
    let close = "Host: x\r\nConnection: close\r\n\r\n";
    let cases = [
        (
            "431",
            format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n"),
        ),
        ("400", "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n".into()),
        (
            "400",
            "POST /webserver/sync HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx".into(),
        ),
        ("404", format!("GET /nosuch HTTP/1.1\r\n{close}")),
        ("405", format!("DELETE /healthz HTTP/1.1\r\n{close}")),
    ];
    for (status, request) in cases {
        let reply = raw_exchange(server.address, &request).await;
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status}")),
            "{request:?}: {reply}"
        );
    }
    let metrics = metrics_of(server.address).await;
    let counts = [
        "bad_request",
        "head_too_large",
        "not_found",
        "method_not_allowed",
    ]
    .map(|outcome| count(&metrics, "", "", outcome));
    assert_eq!(counts, [2, 1, 1, 1], "{metrics}");
    server.stop().await;
}

/// HTTP/2 by hand (prior knowledge over plain TCP): only the frames these
/// tests send, since hyper's client cannot send a ping or a reset when a
/// test asks.
mod h2_frames {
    pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    const END_STREAM: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;
    /// RST_STREAM's code for "no error": the stream is merely abandoned.
    pub const NO_ERROR: u32 = 0;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut frame = length[1..].to_vec();
        frame.extend([kind, flags]);
        frame.extend(stream.to_be_bytes());
        frame.extend(payload);
        frame
    }

    /// An empty SETTINGS frame: every setting at its default.
    pub fn settings() -> Vec<u8> {
        frame(0x4, 0, 0, &[])
    }

    pub fn ping(n: u64) -> Vec<u8> {
        frame(0x6, 0, 0, &n.to_be_bytes())
    }

    /// A whole header block, each field a literal HPACK does not index.
    pub fn headers(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in fields {
            block.push(0);
            for text in [name, value] {
                block.push(u8::try_from(text.len()).unwrap().min(126));
                block.extend(text.as_bytes());
            }
        }
        frame(0x1, END_HEADERS, stream, &block)
    }

    pub fn data(stream: u32, bytes: &[u8], end: bool) -> Vec<u8> {
        frame(0x0, if end { END_STREAM } else { 0 }, stream, bytes)
    }

    pub fn reset(stream: u32, code: u32) -> Vec<u8> {
        frame(0x3, 0, stream, &code.to_be_bytes())
    }
}

/// Issue 18: an HTTP/2 connection that only pings stayed open for the idle
/// timeout plus the header timeout (12.5 s by default), not the idle
/// timeout docs/configuration.md states. With 1 s and 10 s it must close after 1 s
/// and long before 11 s.
#[tokio::test]
async fn an_http2_connection_that_only_pings_is_closed_at_the_idle_timeout() {
    let server = Server::start(ServeOptions {
        idle_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(10),
        ..quick()
    })
    .await;
    let (mut read, mut write) = TcpStream::connect(server.address)
        .await
        .unwrap()
        .into_split();
    let started = Instant::now();
    write
        .write_all(&[h2_frames::PREFACE, &h2_frames::settings()].concat())
        .await
        .unwrap();
    let pinging = async {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        for n in 0u64.. {
            every.tick().await;
            if write.write_all(&h2_frames::ping(n)).await.is_err() {
                break;
            }
        }
    };
    let closed = async {
        let mut sink = vec![0; 4096];
        while read.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    };
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            () = closed => {}
            () = pinging => {}
        }
    })
    .await;
    let open_for = started.elapsed();
    assert!(ended.is_ok(), "still open after {open_for:?}");
    assert!(open_for >= Duration::from_secs(1), "{open_for:?}");
    assert!(open_for < Duration::from_secs(6), "{open_for:?}");
    server.stop().await;
}

async fn metrics_of(address: SocketAddr) -> String {
    raw_exchange(
        address,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
}

/// The count of `/metrics` series with these labels (`hook`, `operator`,
/// `outcome`, in Prometheus' order).
fn count(metrics: &str, hook: &str, operator: &str, outcome: &str) -> u64 {
    let series = format!(
        r#"opshooks_hook_requests_total{{hook="{hook}",operator="{operator}",outcome="{outcome}"}} "#
    );
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap()
}

/// Issue 18: an HTTP/2 stream reset with NO_ERROR before its declared
/// Content-Length arrived was read as a whole body (hyper ends the body
/// there without an error) and computed; that the cut body is refused is
/// `read_body`'s unit test. Issue 31: without a Content-Length the same
/// reset ends a whole fixture, valid JSON, which was computed and counted
/// and logged `status=200`, though the answer to a reset stream is never
/// sent. Either way the call now counts (and logs) as `client_gone`.
/// `/metrics` is asked until the call is counted.
#[tokio::test]
async fn an_http2_stream_reset_before_the_answer_is_counted_as_client_gone() {
    let server = Server::start(quick()).await;
    let body = request();
    let longer = (body.len() + 10).to_string();
    let outcomes = ["ok", "bad_request", "client_gone"];
    for (calls, declared) in [(1, Some(longer.as_str())), (2, None)] {
        let mut fields = vec![
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/webserver/sync"),
            (":authority", "localhost"),
            ("content-type", "application/json"),
        ];
        fields.extend(declared.map(|length| ("content-length", length)));
        let mut stream = TcpStream::connect(server.address).await.unwrap();
        let frames = [
            h2_frames::PREFACE.to_vec(),
            h2_frames::settings(),
            h2_frames::headers(1, &fields),
            h2_frames::data(1, &body, false),
            h2_frames::reset(1, h2_frames::NO_ERROR),
        ];
        stream.write_all(&frames.concat()).await.unwrap();
        let counted = async {
            loop {
                let metrics = metrics_of(server.address).await;
                // A series the server does not know counts nothing.
                let counts = outcomes.map(|outcome| {
                    std::panic::catch_unwind(|| count(&metrics, "sync", "webserver", outcome))
                        .unwrap_or(0)
                });
                if counts.iter().sum::<u64>() >= calls {
                    return counts;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let counts = tokio::time::timeout(Duration::from_secs(10), counted)
            .await
            .expect("the call is counted");
        assert_eq!(
            counts,
            [0, 0, calls],
            "{outcomes:?}, Content-Length {declared:?}"
        );
        drop(stream);
    }
    server.stop().await;
}

/// Opens a call that declares a `Content-Length` of 32 MiB and sends its
/// body one byte every 100 ms, until the returned task is aborted.
async fn trickler(address: SocketAddr) -> JoinHandle<()> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = "POST /webserver/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 33554432\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(b"{").await.unwrap();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            if stream.write_all(b" ").await.is_err() {
                return;
            }
        }
    })
}

/// Issue 31: two connections declaring 32 MiB bodies and trickling them a
/// byte at a time reserved the whole 64 MiB buffered budget, so every other
/// call (a 3.6 KB one too) got 429 until their deadline. A body now holds
/// the budget it has received, and an ordinary call is answered at once.
#[tokio::test]
async fn regression_two_trickled_huge_bodies_do_not_starve_a_small_call() {
    let server = Server::start(quick()).await;
    let trickling = [
        trickler(server.address).await,
        trickler(server.address).await,
    ];
    // Both calls are in: their headers and first bytes were read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let started = Instant::now();
        let stream = TcpStream::connect(server.address).await.unwrap();
        let reply = exchange(stream, "/webserver/sync", &request()).await;
        let took = started.elapsed();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }
    for task in trickling {
        task.abort();
    }
    server.stop().await;
}

/// Issue 31: a body trickled a byte every 100 ms held its call place until
/// the 9 s deadline, so some 260 such connections took every place. A
/// body now arrives at --min-body-bytes-per-second on average after its
/// first 2 s, and never pauses longer than 2 s: both tricklers here, the
/// slow one and one that sends 64 KiB and stalls, are answered 408 in
/// about 2 s, naming the flag.
#[tokio::test]
async fn regression_a_trickled_or_stalled_body_is_408_long_before_the_deadline() {
    let server = Server::start(quick()).await;
    for (first, every) in [(1, Some(Duration::from_millis(100))), (64 * 1024, None)] {
        let stream = TcpStream::connect(server.address).await.unwrap();
        let (mut read, mut write) = tokio::io::split(stream);
        let head = "POST /webserver/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n";
        write.write_all(head.as_bytes()).await.unwrap();
        write.write_all(&vec![b' '; first]).await.unwrap();
        let started = Instant::now();
        let sender = tokio::spawn(async move {
            let Some(every) = every else {
                return std::future::pending::<()>().await;
            };
            loop {
                tokio::time::sleep(every).await;
                if write.write_all(b" ").await.is_err() {
                    return;
                }
            }
        });
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(12), read.read_to_end(&mut reply)).await;
        let took = started.elapsed();
        sender.abort();
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 408"),
            "{first} bytes first: {reply}"
        );
        assert!(reply.contains("--min-body-bytes-per-second"), "{reply}");
        assert!(
            took < Duration::from_secs(5),
            "{first} bytes first: answered after {took:?}"
        );
    }
    server.stop().await;
}
