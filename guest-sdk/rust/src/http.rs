//! Outbound HTTP (abi/SPEC.md, "v1: outbound HTTP"): a small client over the host
//! function `http_request`. The host makes the request under the entity type's egress
//! settings (deploy `--egress` and the others): only the URLs its allowlist names are
//! reached, within a timeout, a response cap and a rate per entity. The response is
//! recorded with the message, so a replay after a failure does not call again; a member
//! that crashes in the middle of a message may still repeat the call when the message
//! runs again: send an idempotency key (a header) to services that take one.

use crate::{Code, Context, Error};
use std::time::Duration;

/// An outbound HTTP request. Header names and values may not hold CR, LF or NUL (the
/// request then fails with [`Code::BadRequest`] and nothing is sent); the host sets
/// `Host`, `Content-Length`, `Transfer-Encoding` and `Connection` itself and refuses
/// them here.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HttpRequest {
    /// The method; empty is GET.
    pub method: String,
    /// An absolute `http` or `https` URL.
    pub url: String,
    /// The headers, in order, as (name, value).
    pub headers: Vec<(String, String)>,
    /// The body (at most the host's message cap, 1 MiB by default).
    pub body: Vec<u8>,
    /// The request's timeout; `None` is the type's egress timeout (10 s by default),
    /// which also bounds a longer one, as the message's deadline does.
    pub timeout: Option<Duration>,
}

impl HttpRequest {
    /// A GET of `url`.
    pub fn get(url: &str) -> HttpRequest {
        HttpRequest { method: "GET".to_string(), url: url.to_string(), ..HttpRequest::default() }
    }

    /// A POST of `body` to `url`.
    pub fn post(url: &str, body: &[u8]) -> HttpRequest {
        HttpRequest { method: "POST".to_string(), url: url.to_string(), body: body.to_vec(), ..HttpRequest::default() }
    }

    /// Adds the header `name: value`.
    pub fn header(mut self, name: &str, value: &str) -> HttpRequest {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// The answer to an [`HttpRequest`]: a status of 4xx or 5xx is an answer, not an error.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HttpResponse {
    /// The status code, such as 200.
    pub status: u16,
    /// The headers as the host gives them: names in canonical form ("Content-Type"),
    /// sorted.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first value of the header `name` (compared without regard to case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl Context {
    /// Sends `req` through the host and returns the response. Errors: [`Code::EgressDenied`]
    /// (off the type's allowlist, or a non-public address it does not name),
    /// [`Code::EgressTooLarge`], [`Code::EgressFailed`] (connection, DNS, TLS, too many
    /// redirects), [`Code::EgressRateLimited`], [`Code::Timeout`], [`Code::BadRequest`],
    /// [`Code::NotAllowed`] (in `on_passivate`), [`Code::Unavailable`] (outside a node).
    pub fn http(&mut self, req: &HttpRequest) -> Result<HttpResponse, Error> {
        let headers = encode_headers(&req.headers)?;
        let out = self.host.http_request(&req.method, &req.url, &headers, &req.body, crate::context::timeout_ms(req.timeout))?;
        decode_response(&out)
    }
}

/// Renders headers as "Name: value\n" lines; CR, LF or NUL anywhere, or a name that is
/// empty or holds a colon or white space, is [`Code::BadRequest`].
pub(crate) fn encode_headers(headers: &[(String, String)]) -> Result<Vec<u8>, Error> {
    let mut b = Vec::new();
    for (name, value) in headers {
        if name.is_empty() || name.bytes().any(|c| c <= b' ' || c == b':' || c == 0x7f) {
            return Err(Error::with_code(Code::BadRequest, format!("header name {:?} is not an HTTP token", name)));
        }
        if value.bytes().any(|c| c == b'\r' || c == b'\n' || c == 0) {
            return Err(Error::with_code(Code::BadRequest, format!("header {} has a CR, LF or NUL in its value", name)));
        }
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b": ");
        b.extend_from_slice(value.as_bytes());
        b.push(b'\n');
    }
    Ok(b)
}

/// Parses "Name: value\n" lines.
pub(crate) fn decode_headers(b: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(b);
    text.split('\n')
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.to_string(), value.trim_start_matches(|c| c == ' ' || c == '\t').to_string()))
        })
        .collect()
}

/// Parses http_request's result: status (u32 LE), the headers' length (u32 LE), the
/// header lines, the body.
pub(crate) fn decode_response(b: &[u8]) -> Result<HttpResponse, Error> {
    if b.len() < 8 {
        return Err(Error::with_code(Code::Error, format!("a response of {} bytes", b.len())));
    }
    let status = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let n = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    if n > b.len() - 8 {
        return Err(Error::with_code(Code::Error, "a response whose headers overrun it"));
    }
    Ok(HttpResponse { status: status.min(u16::MAX as u32) as u16, headers: decode_headers(&b[8..8 + n]), body: b[8 + n..].to_vec() })
}

/// Encodes a response as the host does (the Harness answers with it).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn encode_response(r: &HttpResponse) -> Vec<u8> {
    let hdr = encode_headers(&r.headers).unwrap_or_default();
    let mut out = Vec::with_capacity(8 + hdr.len() + r.body.len());
    out.extend_from_slice(&u32::from(r.status).to_le_bytes());
    out.extend_from_slice(&(hdr.len() as u32).to_le_bytes());
    out.extend_from_slice(&hdr);
    out.extend_from_slice(&r.body);
    out
}

/// An HTTP request that one of the entity type's routes sent the entity (abi/SPEC.md,
/// "HTTP routes"; deploy `--http-route /shop/{id}/...`), for [`Entity::serve_http`](crate::Entity::serve_http).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IncomingRequest {
    /// The method, such as "GET".
    pub method: String,
    /// The whole path, percent-encoded as sent ("/shop/alice/items").
    pub path: String,
    /// The part of the path after the entity's ID: "" or "/" and more ("/items").
    pub rest: String,
    /// The query string without its '?', percent-encoded as sent.
    pub query: String,
    /// The headers as (name, value), names in canonical form and sorted, less the
    /// hop-by-hop ones and, on a route that is not public, `Authorization`.
    pub headers: Vec<(String, String)>,
    /// The body, at most the type's `--http-max-body` bytes.
    pub body: Vec<u8>,
}

impl IncomingRequest {
    /// The first value of the header `name` (compared without regard to case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl HttpResponse {
    /// A response with `status` and `body`, without headers.
    pub fn new(status: u16, body: Vec<u8>) -> HttpResponse {
        HttpResponse { status, headers: Vec::new(), body }
    }

    /// Adds the header `name: value`.
    pub fn with_header(mut self, name: &str, value: &str) -> HttpResponse {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// Parses the HTTP request encoding: method, path, rest, query and headers, each as a
/// u32 little-endian length and its bytes, then the body.
pub(crate) fn decode_request(mut b: &[u8]) -> Result<IncomingRequest, Error> {
    let mut fields: Vec<&[u8]> = Vec::with_capacity(5);
    for _ in 0..5 {
        if b.len() < 4 {
            return Err(Error::new("shardhost: a truncated HTTP request"));
        }
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if n > b.len() - 4 {
            return Err(Error::new("shardhost: an HTTP request whose fields overrun it"));
        }
        fields.push(&b[4..4 + n]);
        b = &b[4 + n..];
    }
    let text = |f: &[u8]| String::from_utf8_lossy(f).into_owned();
    Ok(IncomingRequest {
        method: text(fields[0]),
        path: text(fields[1]),
        rest: text(fields[2]),
        query: text(fields[3]),
        headers: decode_headers(fields[4]),
        body: b.to_vec(),
    })
}

/// Encodes a request as the host does (the Harness sends it).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn encode_request(r: &IncomingRequest) -> Result<Vec<u8>, Error> {
    let hdr = encode_headers(&r.headers)?;
    let mut out = Vec::new();
    for f in [r.method.as_bytes(), r.path.as_bytes(), r.rest.as_bytes(), r.query.as_bytes(), &hdr] {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out.extend_from_slice(&r.body);
    Ok(out)
}

/// Encodes the entity's answer as `shardhost_http`'s reply (a status of 0 is 200); a
/// header name that is not a token, or a CR, LF or NUL in a value, is an error.
pub(crate) fn encode_reply(r: &HttpResponse) -> Result<Vec<u8>, Error> {
    let hdr = encode_headers(&r.headers)?;
    let status = if r.status == 0 { 200 } else { r.status };
    let mut out = Vec::with_capacity(8 + hdr.len() + r.body.len());
    out.extend_from_slice(&u32::from(status).to_le_bytes());
    out.extend_from_slice(&(hdr.len() as u32).to_le_bytes());
    out.extend_from_slice(&hdr);
    out.extend_from_slice(&r.body);
    Ok(out)
}

/// Runs `entity`'s [`serve_http`](crate::Entity::serve_http) on the encoded request
/// `payload`: `None` when it serves no HTTP, else the encoded reply or the error.
pub(crate) fn serve<E: crate::Entity + ?Sized>(entity: &mut E, ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
    let req = match decode_request(payload) {
        Ok(req) => req,
        Err(e) => return Some(Err(e)),
    };
    Some(entity.serve_http(ctx, &req)?.and_then(|r| encode_reply(&r)))
}
