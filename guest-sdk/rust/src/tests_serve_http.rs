//! HTTP routes to entities through the Harness.

use crate::{Context, Entity, Error, Harness, HttpResponse, IncomingRequest, MessageKind};

/// Keeps items: GET lists them, POST /items adds the body, "count" as a message.
struct Shelf {
    items: Vec<String>,
}

impl Entity for Shelf {
    fn receive(&mut self, _ctx: &mut Context, _msg: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(self.items.len().to_string().into_bytes())
    }

    fn serve_http(&mut self, ctx: &mut Context, req: &IncomingRequest) -> Option<Result<HttpResponse, Error>> {
        if ctx.kind() != MessageKind::Http {
            return Some(Err(Error::new(format!("kind {:?}", ctx.kind()))));
        }
        Some(Ok(match (req.method.as_str(), req.rest.as_str()) {
            ("GET", "") | ("GET", "/") => HttpResponse::new(200, self.items.join("\n").into_bytes())
                .with_header("Content-Type", "text/plain")
                .with_header("X-Path", &format!("{}?{}", req.path, req.query)),
            ("POST", "/items") => {
                self.items.push(String::from_utf8_lossy(&req.body).into_owned());
                HttpResponse::new(201, Vec::new())
            }
            ("PUT", _) => HttpResponse::new(0, Vec::new()).with_header("Location", req.header("x-in").unwrap_or("")),
            (m, rest) => HttpResponse::new(404, format!("no {} {}", m, rest).into_bytes()),
        }))
    }
}

fn get(path: &str, rest: &str) -> IncomingRequest {
    IncomingRequest { method: "GET".into(), path: path.into(), rest: rest.into(), ..IncomingRequest::default() }
}

#[test]
fn serve_http_through_the_harness() {
    let mut h = Harness::new("shelf", "s1", |_| Shelf { items: Vec::new() });
    let post = IncomingRequest { method: "POST".into(), rest: "/items".into(), body: b"pear".to_vec(), ..IncomingRequest::default() };
    let r = h.serve_http(&post).unwrap().unwrap();
    assert_eq!((r.status, r.body.len()), (201, 0));
    let mut req = get("/shop/s1/", "/");
    req.query = "a=1".into();
    let r = h.serve_http(&req).unwrap().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"pear"[..]));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("x-path"), Some("/shop/s1/?a=1"));
    let r = h.serve_http(&get("/shop/s1/x", "/x")).unwrap().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (404, &b"no GET /x"[..]));
    assert_eq!(h.send(b"count").unwrap(), b"1");
}

#[test]
fn serve_http_status_zero_is_200_and_injection_is_refused() {
    let mut h = Harness::new("shelf", "s1", |_| Shelf { items: Vec::new() });
    let mut put = IncomingRequest { method: "PUT".into(), ..IncomingRequest::default() };
    put.headers = vec![("X-In".into(), "/next".into())];
    let r = h.serve_http(&put).unwrap().unwrap();
    assert_eq!((r.status, r.header("location")), (200, Some("/next")));
    // A CR LF that reaches a response header: the SDK refuses to encode it.
    put.headers = vec![("X-In".into(), "/next\r\nSet-Cookie: admin=1".into())];
    let err = h.serve_http(&put).unwrap().unwrap_err();
    assert!(err.message().contains("CR, LF or NUL"), "{}", err.message());
}

struct Plain;

impl Entity for Plain {
    fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(msg.to_vec())
    }
}

#[test]
fn no_http_by_default() {
    let mut h = Harness::new("plain", "p1", |_| Plain);
    assert!(h.serve_http(&get("/p/p1", "")).is_none());
}

#[test]
fn request_encoding_round_trip_and_truncation() {
    let req = IncomingRequest {
        method: "POST".into(),
        path: "/a/b%20c/d".into(),
        rest: "/d".into(),
        query: "q=1".into(),
        headers: vec![("A".into(), "1".into()), ("B".into(), "2".into())],
        body: b"body\x00".to_vec(),
    };
    let b = crate::http::encode_request(&req).unwrap();
    assert_eq!(crate::http::decode_request(&b).unwrap(), req);
    for k in 0..b.len() - req.body.len() {
        assert!(crate::http::decode_request(&b[..k]).is_err(), "cut at {}", k);
    }
}
