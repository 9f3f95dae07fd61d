//! Every request goes through [`Client::send`]: it builds the URL, adds the bearer key, the
//! call's deadline and `Accept`, sends, applies the retries of its [`RetryClass`]
//! ([`crate::retry`]) and maps a non-2xx reply to an [`Error`] (contract §1.5).

use crate::client::Client;
use crate::error::{Error, Result};
use crate::retry::{self, RetryClass};
use bytes::Bytes;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Method, Response};
use serde::de::DeserializeOwned;
use std::time::{Duration, Instant};
use tracing::debug;

/// The body of a call.
pub(crate) enum Body {
    /// No body (`Content-Length: 0` on POST/PUT).
    Empty,
    /// `application/json`.
    Json(Vec<u8>),
    /// `application/octet-stream`, resendable.
    Bytes(Bytes),
    /// `application/octet-stream` from a stream: sent once, never retried.
    Stream(reqwest::Body),
    /// `multipart/form-data` (template builds, contract §2.8): sent once, never retried.
    Multipart(Option<reqwest::multipart::Form>),
}

/// How long a call may take, from sending until its whole reply is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// The client's [`crate::ClientBuilder::timeout`].
    Default,
    /// A fixed deadline.
    After(Duration),
    /// None: streams, transfers, cells without a timeout.
    Never,
}

/// One API call, before it is sent.
pub(crate) struct Call {
    pub method: Method,
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
    pub body: Body,
    pub deadline: Deadline,
    pub accept: &'static str,
    pub retry: RetryClass,
}

impl Call {
    /// A call with no body, the client's normal deadline and JSON accepted.
    pub fn new(method: Method, segments: &[&str]) -> Call {
        Call {
            method,
            segments: segments.iter().map(|s| s.to_string()).collect(),
            query: Vec::new(),
            body: Body::Empty,
            deadline: Deadline::Default,
            accept: "application/json",
            retry: RetryClass::default(),
        }
    }

    /// Adds a query parameter.
    pub fn query(mut self, key: &str, value: impl Into<String>) -> Call {
        self.query.push((key.to_string(), value.into()));
        self
    }

    /// A JSON body.
    pub fn json<T: serde::Serialize>(mut self, body: &T) -> Result<Call> {
        let bytes = serde_json::to_vec(body).map_err(|e| Error::Decode {
            what: "request body".into(),
            message: e.to_string(),
        })?;
        self.body = Body::Json(bytes);
        Ok(self)
    }

    /// A raw body.
    pub fn body(mut self, body: Body) -> Call {
        self.body = body;
        self
    }

    /// The deadline.
    pub fn deadline(mut self, deadline: Deadline) -> Call {
        self.deadline = deadline;
        self
    }

    /// The `Accept` header.
    pub fn accept(mut self, accept: &'static str) -> Call {
        self.accept = accept;
        self
    }

    /// Takes part in the warm-up retry.
    pub fn warmup(mut self) -> Call {
        self.retry.warmup = true;
        self
    }

    /// Takes part in the capacity retry.
    pub fn capacity(mut self) -> Call {
        self.retry.capacity = true;
        self
    }

    /// `POST /v1/sandboxes` style name for errors.
    fn describe(&self) -> String {
        format!("{} /v1/{}", self.method, self.segments.join("/"))
    }
}

impl Client {
    fn request(&self, call: &mut Call, attempt: usize) -> Option<reqwest::RequestBuilder> {
        let segments: Vec<&str> = call.segments.iter().map(String::as_str).collect();
        let query: Vec<(&str, &str)> = call
            .query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let url = self.url(&segments, &query);
        let mut rb = self
            .inner
            .http
            .request(call.method.clone(), url)
            .bearer_auth(&self.inner.key)
            .header(ACCEPT, call.accept);
        match call.deadline {
            Deadline::Default => rb = rb.timeout(self.inner.timeout),
            Deadline::After(t) => rb = rb.timeout(t),
            Deadline::Never => {}
        }
        let rb = match &mut call.body {
            Body::Empty => rb.body(Vec::new()),
            Body::Json(b) => rb.header(CONTENT_TYPE, "application/json").body(b.clone()),
            Body::Bytes(b) => rb
                .header(CONTENT_TYPE, "application/octet-stream")
                .body(b.clone()),
            Body::Stream(_) | Body::Multipart(_) if attempt > 0 => return None,
            Body::Multipart(form) => rb.multipart(form.take()?),
            Body::Stream(s) => {
                let body = std::mem::replace(s, reqwest::Body::from(Vec::new()));
                rb.header(CONTENT_TYPE, "application/octet-stream")
                    .body(body)
            }
        };
        Some(rb)
    }

    /// Sends `call` with its retries; returns the 2xx response.
    ///
    /// # Errors
    /// [`Error::Connection`] without an answer; the mapped API error for a non-2xx.
    pub(crate) async fn send(&self, mut call: Call) -> Result<Response> {
        let started = Instant::now();
        let resendable = !matches!(call.body, Body::Stream(_) | Body::Multipart(_));
        let mut not_found_retried = false;
        let (mut warmups, mut capacity_tries) = (0u32, 0usize);
        let mut attempt = 0;
        loop {
            let rb = self.request(&mut call, attempt).ok_or_else(|| {
                Error::Config("a streamed request body cannot be sent twice".into())
            })?;
            attempt += 1;
            let resp = rb.send().await.map_err(|e| connection_error(&e))?;
            let status = resp.status();
            if status.is_success() {
                return Ok(resp);
            }
            let retry_after = retry::retry_after(resp.headers());
            let body = resp.bytes().await.unwrap_or_default();
            let err = Error::from_reply(status.as_u16(), retry_after, &body);
            let wait = if !resendable {
                None
            } else if status == 404 && !not_found_retried && retry::retries_not_found(&call.method)
            {
                not_found_retried = true;
                Some(retry::NOT_FOUND_DELAY)
            } else if call.retry.warmup && err.is_warmup() {
                let d = retry::warmup_delay(warmups);
                warmups += 1;
                (started.elapsed() + d <= self.inner.ready_timeout).then_some(d)
            } else if call.retry.capacity {
                retry::capacity_wait(status.as_u16(), retry_after, &body)
                    .map(|base| retry::with_jitter(base, capacity_tries))
                    .filter(|d| started.elapsed() + *d <= self.inner.max_create_retry)
                    .inspect(|_| capacity_tries += 1)
            } else {
                None
            };
            match wait {
                Some(d) => {
                    debug!(call = %call.describe(), status = status.as_u16(), wait_ms = d.as_millis() as u64, "retrying");
                    tokio::time::sleep(d).await;
                }
                None => return Err(err),
            }
        }
    }

    /// Sends `call` and decodes its JSON reply.
    ///
    /// # Errors
    /// As [`Client::send`]; [`Error::Decode`] when the body is not the expected JSON.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        let what = call.describe();
        let resp = self.send(call).await?;
        let body = resp.bytes().await.map_err(|e| connection_error(&e))?;
        serde_json::from_slice(&body).map_err(|e| Error::Decode {
            what,
            message: e.to_string(),
        })
    }

    /// Sends `call` and ignores the reply body.
    ///
    /// # Errors
    /// As [`Client::send`].
    pub(crate) async fn unit(&self, call: Call) -> Result<()> {
        let resp = self.send(call).await?;
        resp.bytes().await.map_err(|e| connection_error(&e))?;
        Ok(())
    }
}

/// The error for a request that got no HTTP answer (or whose body broke off).
pub(crate) fn connection_error(err: &reqwest::Error) -> Error {
    let url = err
        .url()
        .map(|u| {
            let mut u = u.clone();
            u.set_query(None);
            u.to_string()
        })
        .unwrap_or_else(|| "the server".into());
    let message = if err.is_timeout() {
        "timed out".to_string()
    } else {
        root_cause(err)
    };
    Error::Connection { url, message }
}

/// The innermost message of an error chain.
pub(crate) fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = err;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}
