// kiln::remote::RemoteClient: many byte-range reads of S3 (SigV4) and HTTP(S) objects in flight
// from one thread, through one curl_multi handle (reader/remote/remote.md).
//
//   RemoteClient client = *RemoteClient::Create(options);
//   ObjectInfo obj = *client.Stat("s3://bucket/ds/data-00000.kiln");   // size + ETag
//   client.QueueRange(/*tag=*/1, obj, offset, length, dest);            // dest: caller's bytes
//   RemoteCompletion done; client.Wait(&done);                          // done.tag == 1
//
// Bytes land straight in the caller's buffer (the write callback copies into `dest`, no
// staging copy). Every range read of an object sends `If-Match: <ETag recorded by Stat>`, so an
// object replaced after Stat fails with 412 PreconditionFailed instead of mixing versions (a
// weak ETag, W/"...", which If-Match never matches, is compared with each answer's instead).
// Unsigned http(s) requests follow up to 5 redirects; a transfer stalled for stall_timeout_ms
// is a timeout. Retries: 5xx (503 SlowDown included), 429, timeouts, refused and reset connections,
// short bodies; up to `max_retries` more attempts, exponential backoff with jitter. Never retried:
// other 4xx. Every request has a timeout, so nothing waits forever.
// Hedging: a range read still running past a threshold learnt from this client's own latencies
// (HedgePolicy) gets a second identical request; the first to finish wins, the other is
// cancelled (remote.md, "Hedged requests").
//
// Errors name the URL as given, the HTTP status and the server's error code and message
// (e.g. "s3://b/k: HTTP 403 SignatureDoesNotMatch: The request signature ..."); location().file
// is the URL. Status codes: NotFound for 404, IOError for everything else (403, 412, 5xx after
// the retries, transport failures).
//
// Thread safety: one thread uses a client at a time; clients share nothing mutable.
// Lifetime: a queued read's `dest` must stay valid until its completion is returned by Wait()
// or the client is destroyed (which abandons reads in flight).
#ifndef KILN_READER_REMOTE_REMOTE_CLIENT_H_
#define KILN_READER_REMOTE_REMOTE_CLIENT_H_

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"
#include "reader/range_reader.h"
#include "reader/remote/remote_url.h"

namespace kiln::remote {

class DiskCache;

// Hedged requests for the slow tail: a range read (QueueRange, QueueSuffix) whose request has
// run for longer than max(min_ms, p95_multiple x the p95 latency of this client's completed
// reads) gets a second request for the same bytes with the same If-Match (into a buffer of its
// own); whichever completes first gives the read its bytes and the other is cancelled. A failed
// request of the two leaves the read to the other; a read is hedged at most once. Not before
// kHedgeMinSamples reads have completed (no p95 yet), and at most one hedge per
// kHedgeBudgetRequests requests sent, so a server slow for everyone does not get twice the load.
// p95_multiple 0 turns hedging off. Counted in RemoteStats::hedges and hedge_wins.
struct HedgePolicy {
  double p95_multiple = 3.0;  // 0: off
  int64_t min_ms = 100;       // the threshold's floor, milliseconds
  static constexpr uint64_t kHedgeMinSamples = 16;
  static constexpr uint64_t kHedgeBudgetRequests = 10;
  bool enabled() const { return p95_multiple > 0; }
};

// Defaults below; readers of a dataset at a URL take AWS_MAX_ATTEMPTS and the
// KILN_REMOTE_*_TIMEOUT_MS variables from the environment (remote.md, "Retry policy").
struct RemoteOptions {
  AwsSettings aws;                     // signing, region, endpoint, addressing (LoadAwsSettings)
  std::string ca_file;                 // PEM bundle to trust for https (empty: the system's)
  uint32_t max_connections = 64;       // connections per host; reads beyond this wait in curl
  int64_t connect_timeout_ms = 5000;   // per attempt
  int64_t request_timeout_ms = 60000;  // per attempt, whole transfer
  // Per attempt: a transfer that moves no byte for this long ends as a timeout (and is retried);
  // 0: off. Whole seconds (libcurl's CURLOPT_LOW_SPEED_TIME), at least 1.
  int64_t stall_timeout_ms = 15000;
  uint32_t max_retries = 8;      // attempts after the first: with the backoff below,
                                 // rides out about 8 s of a server gone (a restart)
  int64_t backoff_base_ms = 50;  // first retry waits in [base/2, base], doubling up to max
  int64_t backoff_max_ms = 2000;
  HedgePolicy hedge;  // the Loader sets it from LoaderOptions::remote_hedge_*
  // Dataset order (Loader): whole extents read ahead when the open's fastest request took at
  // least this long (microseconds; 0: always), else a chunk's records merged into GETs.
  int64_t extents_from_us = 1000;
  // A local cache of the objects' bytes (disk_cache.h): a range it holds whole is copied from
  // local disk and completes at once (counted in RequestStats::cache_reads / cache_bytes, not as
  // a request). Null: every read goes to the network. The Loader sets it.
  std::shared_ptr<DiskCache> cache;
  // The cache's directory and size limit from KILN_REMOTE_CACHE_DIR / KILN_REMOTE_CACHE_BYTES
  // (read at open); LoaderOptions::remote_cache_dir / remote_cache_bytes win when set.
  std::string cache_dir;
  uint64_t cache_bytes = 0;  // 0: as much as the file system allows (disk_cache.h)
};

// An object as Stat saw it.
struct ObjectInfo {
  std::string url;  // as given (s3://... or http(s)://...)
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes included; empty if the server sent none
};

struct RemoteCompletion {
  uint64_t tag = 0;
  uint64_t bytes = 0;        // bytes written to dest (short past the end of the object)
  uint64_t object_size = 0;  // total size from Content-Range when the server sent it, else 0
  int http_status = 0;       // last attempt's status, 0 when no response came
  std::string etag;          // the response's ETag header, if any
  Status status;             // OK, or the error described in the header comment
};

// The errno a RangeReader reports for a failed remote read (range_reader.h, Wait): ENOENT for
// a missing object, ESTALE for one replaced since it was opened (HTTP 412), EIO otherwise.
inline int ReadErrno(const RemoteCompletion& done) {
  if (done.status.code() == StatusCode::kNotFound) return ENOENT;
  if (done.http_status == 412) return ESTALE;
  return EIO;
}

// Counters since Create (reader/range_reader.h: latency per attempt in a histogram).
using RemoteStats = RequestStats;

class RemoteClient {
 public:
  // Errors: Internal when libcurl cannot be initialised.
  static Result<std::unique_ptr<RemoteClient>> Create(RemoteOptions options);
  ~RemoteClient();
  RemoteClient(const RemoteClient&) = delete;
  RemoteClient& operator=(const RemoteClient&) = delete;

  // Size and ETag of `url` (a HEAD; on an error answer a one-byte GET fetches the server's error
  // code, which HEAD answers lack). Completions of queued reads that finish meanwhile are kept
  // for Wait(). Errors: InvalidArgument for a malformed URL, else as in the header comment.
  Result<ObjectInfo> Stat(const std::string& url);

  // Queues a read of [offset, offset + length) of `object` into `dest` (length bytes), sending
  // If-Match: object.etag when it is set. Starts at once; reported by Wait() with `tag`.
  void QueueRange(uint64_t tag, const ObjectInfo& object, uint64_t offset, uint64_t length,
                  uint8_t* dest);
  // Queues a read of the last `length` bytes (all of a smaller object) into `dest`, without
  // needing the size (a footer); the completion's object_size gives where they start.
  void QueueSuffix(uint64_t tag, const ObjectInfo& object, uint64_t length, uint8_t* dest);

  // Queues an upload of the local file `path` (`size` bytes) to `url` with one PUT (s3://:
  // signed; unsigned for http(s)), retried as reads are; its completion's etag is the object's
  // as the server answered. kMaxPutBytes at most (S3's limit for one PUT). Errors (the
  // completion's): InvalidArgument for a file over the limit; IOError naming `path` when it
  // cannot be read; the server's answer as for reads (403, 404 NoSuchBucket, 5xx after retries).
  static constexpr uint64_t kMaxPutBytes = uint64_t{5} << 30;
  void QueuePut(uint64_t tag, const std::string& url, const std::string& path, uint64_t size);

  // Blocks until one queued read finishes (retries done) and returns it in `*done`.
  // Errors: InvalidArgument when nothing is in flight; Internal when curl_multi fails.
  Status Wait(RemoteCompletion* done);
  // As Wait, but gives up after about `timeout_ms` (>= 0) without a completion: returns true
  // with `*done` set, or false. Errors: as Wait.
  Result<bool> WaitFor(RemoteCompletion* done, int timeout_ms);
  // Queued reads not yet returned by Wait().
  uint32_t in_flight() const;
  // From any thread: makes a WaitFor in progress (or the next one) return false (no completion)
  // at once; the reads stay in flight. (The Loader's destructor interrupts its fetch threads.)
  void Wakeup();

  const RemoteStats& stats() const { return stats_; }

  struct Request;  // one queued read (internal; public for libcurl's C callbacks)

 private:
  explicit RemoteClient(RemoteOptions options);
  void Enqueue(std::unique_ptr<Request> request);
  Status Start(Request* request);
  Status Drive(int timeout_ms);
  void Finish(Request* request, int curl_code);
  void Complete(Request* request, Status status);
  bool Retryable(const Request& request, int curl_code) const;
  // Sends hedges for the reads past the threshold; returns the steady time (us) of the next
  // look, 0 when hedging is off or not yet possible.
  int64_t Hedge(int64_t now_us);
  void Cancel(Request* request);

  RemoteOptions options_;
  void* multi_ = nullptr;                                     // CURLM*
  std::map<void*, std::unique_ptr<Request>> running_;         // by CURL* handle
  std::multimap<int64_t, std::unique_ptr<Request>> delayed_;  // by due time (steady ms)
  std::deque<RemoteCompletion> done_;
  RemoteStats stats_;
  RequestStats read_latency_;   // completed reads' successful requests: the hedging threshold
  int64_t hedge_after_us_ = 0;  // the threshold (0: not known yet)
  int64_t next_hedge_look_us_ = 0;
  uint64_t rng_ = 0x9e3779b97f4a7c15ULL;
  uint64_t next_internal_tag_ = 1ULL << 63;
  std::atomic<bool> woken_{false};
};

}  // namespace kiln::remote

#endif  // KILN_READER_REMOTE_REMOTE_CLIENT_H_
