// Datasets at a URL: a packed shards dataset in S3-compatible object storage (s3://BUCKET/PREFIX)
// or behind an HTTP(S) server that answers range GETs (https://HOST/PATH, presigned URLs too),
// read in place, without a local copy (reader/remote/remote.md, "Reading a dataset").
//
//   Dataset::SetRemoteDatasetOpener(remote::OpenRemoteDataset);   // or InstallRemoteDatasets()
//   std::unique_ptr<Dataset> ds = *Dataset::Open("s3://bucket/fm");
//   Loader::Create(std::move(ds), options);                          // fetch threads: range GETs
//
// Open: GET `kiln.json` (its checksum checked as for a directory); then, for every shard at
// once, a GET of its 64-byte header and one suffix GET of its footer, index and keys (two GETs
// more only when the keys section is larger than guessed from the record count). Each shard's
// size (Content-Range) is checked against the manifest and its ETag recorded; every later read
// of a shard sends If-Match with that ETag, so a shard replaced while a job reads it fails by
// name (ESTALE, "HTTP 412") instead of mixing versions. The header, index and keys are kept in
// an anonymous mapping of the shard's size (MappedFile::Anonymous) and checked by the same code
// as local shards (ShardReader, ShardDataset::FromShards); record payloads are never held there.
//
// Only the shards format can be read at a URL: LMDB and HDF5 datasets are one B-tree / one HDF5
// file read through its own library by memory-mapped pages or POSIX reads, which object storage
// cannot serve; they are refused with NotSupported saying to repack as shards or copy locally.
//
// Settings: AWS credentials, region, endpoint and addressing as the AWS CLI reads them
// (LoadAwsSettings, remote_url.h); AWS_CA_BUNDLE names a PEM bundle to trust for https.
// Thread safety: OpenRemoteDataset from any thread. A RemoteStore's ReadRange from many threads
// (one client per call site, serialised by a mutex: for occasional reads such as kiln show);
// NewRangeReader's readers belong to one fetch thread each.
#ifndef KILN_READER_REMOTE_REMOTE_DATASET_H_
#define KILN_READER_REMOTE_REMOTE_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/status.h"
#include "formats/verifier.h"
#include "reader/range_reader.h"
#include "reader/remote/remote_client.h"

namespace kiln::remote {

class BlockCache;
class DiskCache;

// The objects of one remote dataset (its data files, each with the size and ETag seen at open)
// and the settings to reach them.
class RemoteStore final : public DataFileStore {
 public:
  // `open_latency_us`: the fastest request of the open (open_latency_us() below); `url`: the
  // dataset's (its local cache is named after it).
  RemoteStore(RemoteOptions options, std::vector<ObjectInfo> objects, int64_t open_latency_us = 0,
              std::string url = std::string())
      : options_(std::move(options)),
        objects_(std::move(objects)),
        open_latency_us_(open_latency_us),
        url_(std::move(url)) {}

  const std::vector<ObjectInfo>& objects() const { return objects_; }
  const RemoteOptions& options() const { return options_; }
  // The round trip the open saw: the latency of its fastest request (the manifest's and the
  // shards' header and footer GETs), microseconds, within 19% (RequestStats' buckets); 0 when
  // unknown. The Loader picks how dataset order is read from it.
  int64_t open_latency_us() const { return open_latency_us_; }

  // One blocking range read with If-Match (DataFileStore). Errors: as RemoteClient's reads.
  Status ReadRange(uint32_t file, uint64_t offset, uint64_t size, uint8_t* dest) const override;
  // The counters of ReadRange's requests (RequestStats: its client's, retries and latencies
  // included) since the store was made, as they stood when the last ReadRange returned: never
  // waits for a read in flight. A Loader that reads this dataset one record at a time (a source
  // of a mixture) adds them into LoaderStats::requests. Thread safety: from any thread.
  RequestStats read_range_stats() const;

  // A RangeReader for one fetch thread: its own RemoteClient, `depth` staging buffers of
  // `buffer_bytes` each, any alignment (1). With `blocks` (shared by the loader's readers), reads
  // queued with QueueWithin are served from whole blocks fetched once (block order). Errors:
  // Internal when libcurl cannot start.
  // `hedge`: the hedged requests of its client (remote_client.h); `disk`: a local cache its
  // client reads first (null: none).
  Result<std::unique_ptr<RangeReader>> NewRangeReader(
      uint32_t depth, uint64_t buffer_bytes, std::shared_ptr<BlockCache> blocks = nullptr,
      const HedgePolicy& hedge = {}, std::shared_ptr<DiskCache> disk = nullptr) const;
  // A BlockCache over this store's objects holding at most `capacity_blocks`, with `receivers`
  // threads (at least one) of at most `max_in_flight` GETs each (0: no limit) (block_cache.h);
  // it must not outlive the store. Errors: Internal when libcurl cannot start.
  Result<std::shared_ptr<BlockCache>> NewBlockCache(
      uint32_t capacity_blocks, uint32_t receivers = 1, uint32_t max_in_flight = 0,
      const HedgePolicy& hedge = {}, std::shared_ptr<DiskCache> disk = nullptr) const;
  // The local cache of this dataset in `dir`, at most `capacity_bytes` (0: as the file system
  // allows) (disk_cache.h); not filling yet (DiskCache::StartFill). Errors: as DiskCache::Open.
  Result<std::shared_ptr<DiskCache>> OpenDiskCache(const std::string& dir,
                                                   uint64_t capacity_bytes) const;

 private:
  RemoteOptions options_;
  std::vector<ObjectInfo> objects_;
  int64_t open_latency_us_ = 0;
  std::string url_;
  mutable std::mutex mu_;                         // guards client_
  mutable std::unique_ptr<RemoteClient> client_;  // for ReadRange, made on first use
  // Separate from mu_, which a ReadRange holds for its whole request.
  mutable std::mutex stats_mu_;      // guards read_stats_
  mutable RequestStats read_stats_;  // client_'s counters when the last ReadRange returned
};

// Opens the shards dataset at `url` (s3://, http://, https://; a trailing '/' is ignored) as
// described above. Errors: InvalidArgument for a malformed URL or settings; NotFound naming
// the URL of a missing kiln.json or shard; IOError naming the URL, the HTTP status and the
// server's error code and message (403 SignatureDoesNotMatch, ...); Corruption as
// Dataset::Open (size differs from the manifest, bad header or footer, ...); NotSupported for
// LMDB and HDF5 datasets.
Result<std::unique_ptr<Dataset>> OpenRemoteDataset(const std::string& url);

// VerifyDataset for a shards dataset at `url` (formats/verifier.h): kiln.json fetched and its
// checksum checked, then each shard fetched whole into memory in turn (8 MiB range GETs, all in
// flight, If-Match with the ETag its HEAD gave) and given every check a local shard gets
// (whole-file hash, header, footer, index checksum, every record's checksum; deep mode decodes).
// A missing or resized object, a server error or an LMDB/HDF5 dataset is a problem in the
// report naming the URL. Never fails as a call. Memory: one shard at a time.
VerifyReport VerifyRemoteDataset(const std::string& url, const VerifyOptions& options);

// What UploadDataset did.
struct UploadReport {
  uint64_t files = 0;  // data files, the lists of rejected and skipped inputs, and kiln.json
  uint64_t bytes = 0;
  uint64_t requests = 0, retries = 0;
  double seconds = 0;
};

// Uploads the local shards dataset in `dir` to `url` (s3://BUCKET/PREFIX, s3://BUCKET for the
// bucket's root, or an http(s) server that takes PUT): every data file, and the lists of rejected
// and skipped inputs that kiln.json names (SourceListFiles, formats/manifest.h: rejected.tsv,
// skipped.tsv), with one PUT (up to 4 at once; each at most 5 GiB), each checked afterwards
// with a HEAD (its size must be the manifest's, a list's its local file's),
// and kiln.json last, only once every data file is there: a reader never sees a partial dataset (it
// opens kiln.json first). An existing dataset at `url` (its kiln.json answers a HEAD) is refused
// unless `overwrite`; then its files are replaced in the same order, kiln.json last: a job reading
// the old dataset meanwhile fails by name on a replaced shard (If-Match, HTTP 412), and one opening
// it before the new kiln.json is up fails on the sizes or checksums, never mixes the two.
// Objects of the old dataset that the new one does not name are left. `progress(done, total)`
// is called after each file (bytes). Errors: InvalidArgument for a URL that is not s3:// or
// http(s)://, or an existing dataset; NotSupported for LMDB and HDF5 datasets; the manifest's
// errors (Manifest::Read); IOError naming the file or the URL and the server's answer.
// The check UploadDataset makes before it sends anything: `url` is s3:// or http(s)://, and
// holds no dataset (no kiln.json) unless `overwrite`; a HEAD the server refuses (403: wrong
// keys; 404 NoSuchBucket) fails here. Errors: as UploadDataset's.
Status CheckUploadTarget(const std::string& url, bool overwrite);

Result<UploadReport> UploadDataset(const std::string& dir, const std::string& url, bool overwrite,
                                   const std::function<void(uint64_t, uint64_t)>& progress = {});

// The request rate past which one S3 prefix answers 503 SlowDown: "at least 3,500
// PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second per partitioned prefix" (AWS, Amazon
// S3 user guide, "Best practices design patterns: optimizing Amazon S3 performance").
inline constexpr double kS3GetsPerSecondPerPrefix = 5500;

// The warning for reading `url` at `gets_per_s` GET/s: non-empty for an s3:// URL read faster
// than kS3GetsPerSecondPerPrefix (its shards share one prefix), naming the rate, the limit and
// the cure; "" otherwise (HTTP servers have limits of their own, unknown here).
std::string RequestRateWarning(const std::string& url, double gets_per_s);

// Installs OpenRemoteDataset as Dataset::Open's opener for URLs (Dataset::SetRemoteDatasetOpener)
// and VerifyRemoteDataset as VerifyDataset's (SetRemoteVerifier).
void InstallRemoteDatasets();

}  // namespace kiln::remote

#endif  // KILN_READER_REMOTE_REMOTE_DATASET_H_
