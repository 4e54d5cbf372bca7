#include "reader/remote/remote_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "formats/interrupt.h"
#include "reader/remote/disk_cache.h"

namespace kiln::remote {
namespace {

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool HeaderIs(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

std::string HeaderValue(std::string_view line, size_t name_size) {
  std::string_view v = line.substr(name_size + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
    v.remove_suffix(1);
  return std::string(v);
}

// The text between <tag> and </tag> in an S3 error body, or "".
std::string XmlField(const std::string& body, const std::string& tag) {
  size_t b = body.find("<" + tag + ">");
  if (b == std::string::npos) return {};
  b += tag.size() + 2;
  size_t e = body.find("</" + tag + ">", b);
  return e == std::string::npos ? std::string() : body.substr(b, e - b);
}

// What a server that is not S3 said in an error body: an HTML page's <title> (nginx: "400 The
// plain HTTP request was sent to HTTPS port"), else its first line; printable ASCII only, at
// most 200 characters; "" for none.
std::string PlainErrorText(const std::string& body) {
  std::string text = XmlField(body, "title");
  if (text.empty() && body.find('<') == std::string::npos) text = body.substr(0, body.find('\n'));
  std::string out;
  for (char c : text) {
    if (out.size() >= 200) break;
    if (c >= 0x20 && c < 0x7f) out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

struct RemoteClient::Request {
  enum class Kind { kHead, kProbe, kRange, kSuffix, kPut };
  Kind kind = Kind::kRange;
  uint64_t tag = 0;
  std::string name;      // the URL as given
  std::string http_url;  // where it goes
  bool sign = false;
  std::string if_match;
  // A weak ETag (W/"..."), which If-Match never matches (RFC 9110, 13.1.1: strong comparison):
  // sent as no header, and compared with each answer's ETag instead. `stale`: it differed.
  std::string weak_etag;
  bool stale = false;
  bool misplaced = false;  // a 206 whose Content-Range starts elsewhere than asked
  uint64_t offset = 0, length = 0;
  uint8_t* dest = nullptr;
  uint32_t attempt = 0;
  // Hedging: a hedge reads into `own` and, when it wins, copies into its read's `final_dest`.
  // While both requests of a hedged read run, each one's `twin` is the other.
  bool is_hedge = false;
  bool hedged = false;  // (the read's first request) a hedge was sent
  Request* twin = nullptr;
  std::unique_ptr<uint8_t[]> own;
  uint8_t* final_dest = nullptr;
  std::string upload_path;  // kPut: the local file sent (length bytes), reopened per attempt
  // One attempt's state.
  FILE* upload = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  uint64_t received = 0;
  bool overflow = false;
  std::string body;  // an error answer's body, at most kMaxBody bytes
  std::string etag;
  uint64_t range_total = 0;
  int64_t range_start = -1;  // the answer's Content-Range start, -1 when it sent none
  int64_t started_us = 0;
  char errbuf[CURL_ERROR_SIZE] = {};

  static constexpr size_t kMaxBody = 64 * 1024;

  void Reset() {
    if (upload != nullptr) std::fclose(upload);
    upload = nullptr;
    if (headers != nullptr) curl_slist_free_all(headers);
    if (easy != nullptr) curl_easy_cleanup(easy);
    easy = nullptr;
    headers = nullptr;
    received = 0;
    overflow = false;
    stale = misplaced = false;
    body.clear();
    etag.clear();
    range_total = 0;
    range_start = -1;
    errbuf[0] = '\0';
  }
  std::string RangeText() const {
    if (kind == Kind::kSuffix) return "bytes=-" + std::to_string(length);
    if (kind == Kind::kProbe) return "bytes=0-0";
    return "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
  }
  std::string What() const {
    if (kind == Kind::kPut) return "PUT " + http_url + " from " + upload_path;
    return kind == Kind::kHead ? "HEAD " + http_url : "GET " + RangeText() + " " + http_url;
  }
};

namespace {

long ResponseCode(CURL* easy) {
  long code = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

// Ranges from kLargeRangeBytes up are received through a buffer of kLargeRangeBuffer bytes.
constexpr uint64_t kLargeRangeBytes = 1 << 20;
constexpr long kLargeRangeBuffer = 256 << 10;

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<RemoteClient::Request*>(user);
  size_t len = size * count;
  long code = ResponseCode(r->easy);
  if (code >= 200 && code < 300) {
    if (r->dest == nullptr) return len;  // HEAD, probe
    if (r->received + len > r->length) {
      r->overflow = true;  // a 200 to a range request: the server ignored Range
      return 0;
    }
    std::memcpy(r->dest + r->received, data, len);
    r->received += len;
    return len;
  }
  r->body.append(data,
                 std::min(len, RemoteClient::Request::kMaxBody -
                                   std::min(r->body.size(), RemoteClient::Request::kMaxBody)));
  return len;
}

size_t ReadHeader(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<RemoteClient::Request*>(user);
  std::string_view line(data, size * count);
  if (r->kind == RemoteClient::Request::Kind::kHead && line.substr(0, 5) == "HTTP/") {
    r->body.clear();
  }
  if (line.substr(0, 5) == "HTTP/") {  // a new response (after 100 Continue or a redirect)
    r->etag.clear();
    r->range_total = 0;
    r->range_start = -1;
  } else if (HeaderIs(line, "etag")) {
    r->etag = HeaderValue(line, 4);
  } else if (HeaderIs(line, "content-range")) {
    std::string v = HeaderValue(line, 13);
    if (v.rfind("bytes ", 0) == 0 && v.size() > 6 && v[6] >= '0' && v[6] <= '9') {
      r->range_start = static_cast<int64_t>(std::strtoull(v.c_str() + 6, nullptr, 10));
    }
    size_t slash = v.rfind('/');
    if (slash != std::string::npos && slash + 1 < v.size() && v[slash + 1] != '*') {
      r->range_total = std::strtoull(v.c_str() + slash + 1, nullptr, 10);
    }
  }
  return size * count;
}

}  // namespace

Result<std::unique_ptr<RemoteClient>> RemoteClient::Create(RemoteOptions options) {
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) {
    return Status::Internal(std::string("curl_global_init: ") + curl_easy_strerror(init));
  }
  std::unique_ptr<RemoteClient> client(new RemoteClient(std::move(options)));
  if (client->multi_ == nullptr) return Status::Internal("curl_multi_init failed");
  return client;
}

RemoteClient::RemoteClient(RemoteOptions options) : options_(std::move(options)) {
  multi_ = curl_multi_init();
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options_.max_connections));
  }
}

RemoteClient::~RemoteClient() {
  for (auto& [easy, request] : running_) {
    curl_multi_remove_handle(multi_, easy);
    request->Reset();
  }
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

uint32_t RemoteClient::in_flight() const {
  uint32_t n = 0;
  // A hedged read is one read: its hedge counts only once it runs alone.
  for (auto& [easy, r] : running_) {
    n += r->tag < (1ULL << 63) && !(r->is_hedge && r->twin != nullptr) ? 1 : 0;
  }
  for (auto& [due, r] : delayed_) n += r->tag < (1ULL << 63) ? 1 : 0;
  for (auto& c : done_) n += c.tag < (1ULL << 63) ? 1 : 0;
  return n;
}

void RemoteClient::Enqueue(std::unique_ptr<Request> request) {
  Result<RemoteUrl> url = ParseRemoteUrl(request->name);
  if (!url.ok()) {
    Complete(request.get(), url.status());
    return;
  }
  request->http_url = RequestUrl(*url, options_.aws);
  request->sign = url->scheme == RemoteUrl::Scheme::kS3 && !options_.aws.access_key_id.empty();
  if ((request->kind == Request::Kind::kRange || request->kind == Request::Kind::kSuffix) &&
      request->length == 0) {
    Complete(request.get(), Status::Ok());
    return;
  }
  Request* r = request.get();
  Status started = Start(r);
  if (!started.ok()) {
    Complete(r, started);
    return;
  }
  running_[r->easy] = std::move(request);
}

Status RemoteClient::Start(Request* r) {
  r->Reset();
  r->easy = curl_easy_init();
  if (r->easy == nullptr) return Status::Internal(r->name + ": curl_easy_init failed");
  CURL* e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, r->http_url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  // Whole blocks and extents: a receive buffer of 256 KiB instead of curl's 16 KiB, so a 4 MiB
  // body is 16 recv calls and write callbacks, not 256 (-15% of the block-order CPU at 0 ms:
  // BENCHMARKS.md, "Block order at a URL: where the CPU went"). Only for large ranges: curl
  // allocates it per transfer, and exact order keeps hundreds of small ones in flight.
  if (r->length >= kLargeRangeBytes) curl_easy_setopt(e, CURLOPT_BUFFERSIZE, kLargeRangeBuffer);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, ReadHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_ms));
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  // A transfer that receives (or sends) nothing for stall_timeout_ms ends as a timeout (and is
  // retried) instead of waiting out the whole request timeout.
  if (options_.stall_timeout_ms > 0) {
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(std::max<int64_t>(1, options_.stall_timeout_ms / 1000)));
  }
  // Unsigned http(s): redirects followed (a moved dataset, a CDN); a signed S3 request is not
  // (its signature names the host: the error says where the server pointed).
  if (!r->sign) {
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  if (!options_.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options_.ca_file.c_str());
  if (r->kind == Request::Kind::kHead) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  if (r->kind == Request::Kind::kPut) {
    r->upload = std::fopen(r->upload_path.c_str(), "rb");
    if (r->upload == nullptr) {
      return Status::FromErrno("cannot read", r->upload_path, errno);
    }
    curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(e, CURLOPT_READDATA, r->upload);
    curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r->length));
  } else if (r->kind != Request::Kind::kHead) {
    r->headers = curl_slist_append(r->headers, ("Range: " + r->RangeText()).c_str());
  }
  if (!r->if_match.empty()) {
    r->headers = curl_slist_append(r->headers, ("If-Match: " + r->if_match).c_str());
  }
  if (r->sign) {
    const AwsSettings& aws = options_.aws;
    std::string sigv4 = "aws:amz:" + aws.region + ":s3";
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());  // copied by libcurl
    curl_easy_setopt(e, CURLOPT_USERNAME, aws.access_key_id.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, aws.secret_access_key.c_str());
    r->headers = curl_slist_append(r->headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!aws.session_token.empty()) {
      r->headers =
          curl_slist_append(r->headers, ("x-amz-security-token: " + aws.session_token).c_str());
    }
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  r->started_us = NowUs();
  ++stats_.requests;
  CURLMcode added = curl_multi_add_handle(multi_, e);
  if (added != CURLM_OK) {
    return Status::Internal(r->name + ": curl_multi_add_handle: " + curl_multi_strerror(added));
  }
  return Status::Ok();
}

bool RemoteClient::Retryable(const Request& r, int curl_code) const {
  switch (curl_code) {
    case CURLE_OK: {
      long code = ResponseCode(r.easy);
      return code >= 500 || code == 429;
    }
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

// Stops `r`, one request of a hedged read whose other request finished first: no completion,
// no latency counted (it did not end).
void RemoteClient::Cancel(Request* r) {
  curl_multi_remove_handle(multi_, r->easy);
  auto it = running_.find(r->easy);
  std::unique_ptr<Request> owned = std::move(it->second);
  running_.erase(it);
  owned->Reset();
}

void RemoteClient::Finish(Request* r, int curl_code) {
  const int64_t now_us = NowUs();
  stats_.AddLatencyUs(now_us - r->started_us);
  curl_multi_remove_handle(multi_, r->easy);
  std::unique_ptr<Request> owned = std::move(running_[r->easy]);
  running_.erase(r->easy);
  const long http = ResponseCode(r->easy);
  r->stale = !r->weak_etag.empty() && curl_code == CURLE_OK && http >= 200 && http < 300 &&
             r->etag != r->weak_etag;
  // A 206 for other bytes than asked (a proxy or server that got the range wrong).
  r->misplaced = r->kind == Request::Kind::kRange && curl_code == CURLE_OK && http == 206 &&
                 r->range_start >= 0 && static_cast<uint64_t>(r->range_start) != r->offset;
  const bool succeeded = curl_code == CURLE_OK && !r->overflow && http >= 200 && http < 300 &&
                         !r->stale && !r->misplaced;
  if (r->twin != nullptr) {
    Request* other = r->twin;
    other->twin = nullptr;
    r->twin = nullptr;
    if (!succeeded) {
      // One request of a hedged read failed while the other still runs: the other carries the
      // read (with its own retries).
      r->Reset();
      return;
    }
    Cancel(other);  // this one won
  }
  if (succeeded && (r->kind == Request::Kind::kRange || r->kind == Request::Kind::kSuffix)) {
    read_latency_.AddLatencyUs(now_us - r->started_us);
    const uint64_t n = read_latency_.attempts();
    if (n >= HedgePolicy::kHedgeMinSamples && n % HedgePolicy::kHedgeMinSamples == 0 &&
        options_.hedge.enabled()) {
      const double p95 = static_cast<double>(read_latency_.LatencyQuantileUs(0.95));
      hedge_after_us_ = std::max<int64_t>(options_.hedge.min_ms * 1000,
                                          static_cast<int64_t>(options_.hedge.p95_multiple * p95));
      next_hedge_look_us_ = 0;  // look again with the new threshold
    }
  }
  if (Retryable(*r, curl_code) && r->attempt < options_.max_retries) {
    int64_t cap =
        std::min(options_.backoff_max_ms, options_.backoff_base_ms << std::min(r->attempt, 20u));
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    int64_t delay = cap / 2 + static_cast<int64_t>(rng_ % static_cast<uint64_t>(cap / 2 + 1));
    ++r->attempt;
    ++stats_.retries;
    r->Reset();
    delayed_.emplace(NowUs() / 1000 + delay, std::move(owned));
    return;
  }
  long code = ResponseCode(r->easy);
  std::string attempts =
      r->attempt == 0 ? std::string() : " after " + std::to_string(r->attempt + 1) + " attempts";
  Status status;
  if (curl_code != CURLE_OK && !(curl_code == CURLE_WRITE_ERROR && r->overflow)) {
    std::string detail =
        r->errbuf[0] != '\0' ? r->errbuf : curl_easy_strerror(static_cast<CURLcode>(curl_code));
    status = Status::IOError(r->name + ": " + detail + attempts + " (" + r->What() + ")");
  } else if (r->misplaced) {
    status =
        Status::IOError(r->name + ": HTTP 206 for bytes from " + std::to_string(r->range_start) +
                        ", not the " + r->RangeText() + " asked (" + r->What() + ")");
  } else if (r->stale) {
    status = Status::IOError(r->name + ": the object changed since it was opened (ETag then " +
                             r->weak_etag + ", now " + (r->etag.empty() ? "none" : r->etag) +
                             "; a weak ETag, so checked on each answer instead of If-Match) (" +
                             r->What() + ")");
  } else if (r->overflow) {
    status = Status::IOError(r->name + ": HTTP " + std::to_string(code) +
                             ": the server sent more bytes than asked (Range ignored?) (" +
                             r->What() + ")");
  } else if (code < 200 || code >= 300) {
    std::string s3_code = XmlField(r->body, "Code"), message = XmlField(r->body, "Message");
    if (s3_code.empty() && message.empty()) message = PlainErrorText(r->body);
    std::string text = r->name + ": HTTP " + std::to_string(code);
    if (!s3_code.empty()) text += " " + s3_code;
    if (!message.empty()) text += ": " + message;
    if (code == 412 && !r->if_match.empty()) {
      text += "; the object changed since it was opened (ETag then " + r->if_match + ")";
    }
    text += attempts + " (" + r->What() + ")";
    status = code == 404 ? Status::NotFound(text) : Status::IOError(text);
  }
  if (!status.ok()) status = status.WithFile(r->name);
  Complete(r, std::move(status));
}

void RemoteClient::Complete(Request* r, Status status) {
  RemoteCompletion c;
  c.tag = r->tag;
  c.bytes = r->received;
  c.object_size = r->range_total;
  if (r->easy != nullptr) {
    c.http_status = r->stale ? 412 : static_cast<int>(ResponseCode(r->easy));
    if (r->kind == Request::Kind::kHead) {
      curl_off_t length = -1;
      curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
      c.object_size = length < 0 ? 0 : static_cast<uint64_t>(length);
    }
  }
  c.etag = r->etag;
  if (status.ok() && r->is_hedge) {
    if (r->received > 0) std::memcpy(r->final_dest, r->own.get(), r->received);
    ++stats_.hedge_wins;
  }
  if (status.ok()) {
    stats_.bytes += r->received;
  } else {
    ++stats_.failures;
  }
  c.status = std::move(status);
  r->Reset();
  done_.push_back(std::move(c));
}

int64_t RemoteClient::Hedge(int64_t now_us) {
  int64_t next_us = now_us + hedge_after_us_;  // a request started from now on is due no sooner
  std::vector<Request*> due;
  for (auto& [easy, r] : running_) {
    if (r->is_hedge || r->hedged || r->twin != nullptr || r->tag >= (1ULL << 63) ||
        (r->kind != Request::Kind::kRange && r->kind != Request::Kind::kSuffix)) {
      continue;
    }
    const int64_t at = r->started_us + hedge_after_us_;
    if (at <= now_us) {
      due.push_back(r.get());
    } else {
      next_us = std::min(next_us, at);
    }
  }
  for (Request* r : due) {
    // The budget: one hedge per kHedgeBudgetRequests requests sent (hedges included).
    if ((stats_.hedges + 1) * HedgePolicy::kHedgeBudgetRequests > stats_.requests) break;
    auto h = std::make_unique<Request>();
    h->kind = r->kind;
    h->tag = r->tag;
    h->name = r->name;
    h->http_url = r->http_url;
    h->sign = r->sign;
    h->if_match = r->if_match;
    h->weak_etag = r->weak_etag;
    h->offset = r->offset;
    h->length = r->length;
    h->own.reset(new uint8_t[r->length]);
    h->dest = h->own.get();
    h->final_dest = r->dest;
    h->is_hedge = true;
    r->hedged = true;
    if (!Start(h.get()).ok()) {
      h->Reset();  // no hedge then; the first request carries on
      continue;
    }
    ++stats_.hedges;
    h->twin = r;
    r->twin = h.get();
    running_[h->easy] = std::move(h);
  }
  return next_us;
}

Status RemoteClient::Drive(int timeout_ms) {
  int64_t now_ms = NowUs() / 1000;
  while (!delayed_.empty() && delayed_.begin()->first <= now_ms) {
    std::unique_ptr<Request> r = std::move(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
    Status started = Start(r.get());
    if (!started.ok()) {
      Complete(r.get(), started);
      continue;
    }
    running_[r->easy] = std::move(r);
  }
  int still = 0;
  CURLMcode mc = curl_multi_perform(multi_, &still);
  if (mc != CURLM_OK)
    return Status::Internal(std::string("curl_multi_perform: ") + curl_multi_strerror(mc));
  size_t before = done_.size();
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    auto it = running_.find(msg->easy_handle);
    if (it != running_.end()) Finish(it->second.get(), msg->data.result);
  }
  // Hedges for the requests past the threshold (looked at only when one can be due).
  if (hedge_after_us_ > 0 && !running_.empty()) {
    const int64_t now_us = NowUs();
    if (now_us >= next_hedge_look_us_) next_hedge_look_us_ = Hedge(now_us);
  }
  if (done_.size() != before) return Status::Ok();
  int wait = timeout_ms;
  if (!delayed_.empty()) {
    wait = static_cast<int>(std::clamp<int64_t>(delayed_.begin()->first - NowUs() / 1000, 0, wait));
  }
  if (hedge_after_us_ > 0 && next_hedge_look_us_ > 0) {
    wait = static_cast<int>(
        std::clamp<int64_t>((next_hedge_look_us_ - NowUs() + 999) / 1000, 0, wait));
  }
  mc = curl_multi_poll(multi_, nullptr, 0, wait, nullptr);
  if (mc != CURLM_OK)
    return Status::Internal(std::string("curl_multi_poll: ") + curl_multi_strerror(mc));
  return Status::Ok();
}

Result<bool> RemoteClient::WaitFor(RemoteCompletion* done, int timeout_ms) {
  const int64_t deadline_ms = NowUs() / 1000 + timeout_ms;
  while (true) {
    for (auto it = done_.begin(); it != done_.end(); ++it) {
      if (it->tag < (1ULL << 63)) {
        *done = std::move(*it);
        done_.erase(it);
        return true;
      }
    }
    if (running_.empty() && delayed_.empty()) {
      return Status::InvalidArgument("RemoteClient::Wait: no read in flight");
    }
    const int64_t left_ms = deadline_ms - NowUs() / 1000;
    if (left_ms < 0 || woken_.exchange(false, std::memory_order_acq_rel)) return false;
    if (InterruptRequested()) return Status::Cancelled("interrupted while waiting for a server");
    KILN_RETURN_IF_ERROR(Drive(static_cast<int>(std::min<int64_t>(left_ms, 250))));
  }
}

void RemoteClient::Wakeup() {
  woken_.store(true, std::memory_order_release);
  curl_multi_wakeup(multi_);
}

Status RemoteClient::Wait(RemoteCompletion* done) {
  while (true) {
    KILN_ASSIGN_OR_RETURN(bool got, WaitFor(done, 1000));
    if (got) return Status::Ok();
  }
}

namespace {

// A queued read of `length` bytes at `offset` (kRange) or of the last `length` bytes (kSuffix).
std::unique_ptr<RemoteClient::Request> ReadRequest(RemoteClient::Request::Kind kind, uint64_t tag,
                                                   const ObjectInfo& object, uint64_t offset,
                                                   uint64_t length, uint8_t* dest) {
  auto r = std::make_unique<RemoteClient::Request>();
  r->kind = kind;
  r->tag = tag;
  r->name = object.url;
  if (object.etag.rfind("W/", 0) == 0) {
    r->weak_etag = object.etag;
  } else {
    r->if_match = object.etag;
  }
  r->offset = offset;
  r->length = length;
  r->dest = dest;
  return r;
}

}  // namespace

void RemoteClient::QueueRange(uint64_t tag, const ObjectInfo& object, uint64_t offset,
                              uint64_t length, uint8_t* dest) {
  if (options_.cache != nullptr && options_.cache->Read(object, offset, length, dest)) {
    RemoteCompletion c;
    c.tag = tag;
    c.bytes = length;
    c.object_size = object.size;
    c.http_status = 206;
    c.etag = object.etag;
    ++stats_.cache_reads;
    stats_.cache_bytes += length;
    done_.push_back(std::move(c));
    return;
  }
  Enqueue(ReadRequest(Request::Kind::kRange, tag, object, offset, length, dest));
}

void RemoteClient::QueueSuffix(uint64_t tag, const ObjectInfo& object, uint64_t length,
                               uint8_t* dest) {
  Enqueue(ReadRequest(Request::Kind::kSuffix, tag, object, 0, length, dest));
}

void RemoteClient::QueuePut(uint64_t tag, const std::string& url, const std::string& path,
                            uint64_t size) {
  auto r = std::make_unique<Request>();
  r->kind = Request::Kind::kPut;
  r->tag = tag;
  r->name = url;
  r->upload_path = path;
  r->length = size;
  if (size > kMaxPutBytes) {
    Complete(r.get(), Status::InvalidArgument(
                          url + ": " + path + " is " + std::to_string(size) +
                          " bytes, more than the 5 GiB one PUT may carry (S3's limit): pack "
                          "with a smaller --shard-size"));
    return;
  }
  Enqueue(std::move(r));
}

Result<ObjectInfo> RemoteClient::Stat(const std::string& url) {
  KILN_ASSIGN_OR_RETURN(RemoteUrl parsed, ParseRemoteUrl(url));
  (void)parsed;
  auto run = [&](Request::Kind kind) -> Result<RemoteCompletion> {
    auto r = std::make_unique<Request>();
    r->kind = kind;
    r->tag = next_internal_tag_++;
    r->name = url;
    uint64_t tag = r->tag;
    Enqueue(std::move(r));
    while (true) {
      for (auto it = done_.begin(); it != done_.end(); ++it) {
        if (it->tag == tag) {
          RemoteCompletion c = std::move(*it);
          done_.erase(it);
          return c;
        }
      }
      if (InterruptRequested()) {
        return Status::Cancelled(url + ": interrupted while waiting for the server");
      }
      KILN_RETURN_IF_ERROR(Drive(250));
    }
  };
  KILN_ASSIGN_OR_RETURN(RemoteCompletion head, run(Request::Kind::kHead));
  if (!head.status.ok() && head.http_status >= 400) {
    // HEAD answers carry no body: a one-byte GET brings the server's error code and message.
    KILN_ASSIGN_OR_RETURN(RemoteCompletion probe, run(Request::Kind::kProbe));
    if (!probe.status.ok()) return probe.status;
    // The GET worked where HEAD did not (a server or presigned URL that allows GET only: 403,
    // 405, 501): its Content-Range total and ETag say the same.
    if (probe.http_status == 206 && probe.object_size > 0) {
      return ObjectInfo{url, probe.object_size, probe.etag};
    }
  }
  if (!head.status.ok()) return head.status;
  return ObjectInfo{url, head.object_size, head.etag};
}

}  // namespace kiln::remote
