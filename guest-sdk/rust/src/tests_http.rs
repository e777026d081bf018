//! Outbound HTTP through the Harness.

use crate::http::{decode_response, encode_response};
use crate::{Code, Context, Entity, Error, Harness, HttpRequest, HttpResponse};

/// Posts its message to a URL and replies with the status, a header and the body.
struct Poster {
    headers: Vec<(String, String)>,
}

impl Entity for Poster {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let mut req = HttpRequest::post("https://api.example.com/hook", msg);
        req.headers = self.headers.clone();
        let resp = ctx.http(&req)?;
        Ok(format!("{} {} {}", resp.status, resp.header("x-answer").unwrap_or(""), String::from_utf8_lossy(&resp.body)).into_bytes())
    }
}

#[test]
fn http_through_the_harness() {
    let mut h = Harness::new("poster", "p1", |_| Poster { headers: vec![("Idempotency-Key".into(), "k1".into())] });
    assert_eq!(h.send(b"hi").unwrap_err().code(), Code::EgressDenied);
    h.on_http(|req| {
        assert_eq!((req.method.as_str(), req.url.as_str(), req.body.as_slice()), ("POST", "https://api.example.com/hook", &b"hi"[..]));
        assert_eq!(req.headers, vec![("Idempotency-Key".to_string(), "k1".to_string())]);
        Ok(HttpResponse { status: 201, headers: vec![("X-Answer".into(), "yes".into())], body: b"made".to_vec() })
    });
    assert_eq!(h.send(b"hi").unwrap(), b"201 yes made");
    assert_eq!(h.http_requests().len(), 1);
    h.on_http(|_| Err(Error::with_code(Code::EgressTooLarge, "egress-too-large: 2 MiB")));
    assert_eq!(h.send(b"hi").unwrap_err().code(), Code::EgressTooLarge);
}

#[test]
fn http_refuses_header_injection() {
    for (name, value) in [("X-A", "v\r\nHost: evil"), ("X-A", "v\nX-B: w"), ("X-A\r\nHost", "v"), ("X A", "v"), ("X-A", "v\0")] {
        let headers = vec![(name.to_string(), value.to_string())];
        let mut h = Harness::new("poster", "p1", move |_| Poster { headers: headers.clone() });
        h.on_http(|_| Ok(HttpResponse { status: 200, ..HttpResponse::default() }));
        assert_eq!(h.send(b"hi").unwrap_err().code(), Code::BadRequest, "{:?}: {:?}", name, value);
        assert!(h.http_requests().is_empty());
    }
}

#[test]
fn http_response_round_trip() {
    let r = HttpResponse {
        status: 404,
        headers: vec![("A".into(), "1".into()), ("A".into(), "2".into()), ("B-C".into(), "".into())],
        body: b"x\ny".to_vec(),
    };
    assert_eq!(decode_response(&encode_response(&r)).unwrap(), r);
    assert!(decode_response(&[]).is_err());
    assert!(decode_response(&[1, 0, 0, 0, 9, 0, 0, 0]).is_err());
    for n in 11..=14 {
        assert_eq!(Code::from_number(n).unwrap().number(), n);
    }
}
