// Remote object names and credentials, as the AWS tools take them (reader/remote/remote.md).
//
//   s3://BUCKET/KEY        an object in S3-compatible storage, signed with SigV4
//   http(s)://HOST/PATH    a plain HTTP(S) object (presigned URLs too), read with range GETs
//
// Thread safety: plain functions on values; LoadAwsSettings reads the environment and files.
#ifndef KILN_READER_REMOTE_REMOTE_URL_H_
#define KILN_READER_REMOTE_REMOTE_URL_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln::remote {

struct RemoteUrl {
  enum class Scheme { kS3, kHttp, kHttps };
  Scheme scheme = Scheme::kS3;
  std::string bucket;  // s3 only: the bucket name
  std::string key;     // s3: the object key (no leading '/'); http(s): path and query ("/a/b?x")
  std::string host;    // http(s) only: "host" or "host:port"
  std::string text;    // the URL as given, for messages
};

// True when `name` starts with s3://, http:// or https://.
bool IsRemoteUrl(std::string_view name);
// Parses `url`. Errors: InvalidArgument naming the URL (unknown scheme, empty bucket or key,
// empty host).
Result<RemoteUrl> ParseRemoteUrl(std::string_view url);

// An INI file: section -> key -> value. Keys and section names are trimmed; `#` and `;` start
// comment lines; indented lines under a key (the AWS config's nested `s3 =` block) are stored as
// "KEY.SUBKEY" in the same section.
using IniSection = std::map<std::string, std::string>;
using IniFile = std::map<std::string, IniSection>;
// Errors: InvalidArgument naming `path` and the 1-based line of a line that is neither a
// section, a `key = value`, a comment nor blank.
Result<IniFile> ParseIni(std::string_view text, const std::string& path);

// Where requests go and how they are signed.
struct AwsSettings {
  std::string access_key_id;  // empty: requests are not signed
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when set
  std::string region = "us-east-1";
  std::string endpoint_url;   // e.g. "http://127.0.0.1:8080"; empty: AWS itself
  bool virtual_host = false;  // bucket in the host name instead of the path
  std::string profile = "default";
};

// Reads settings as the AWS CLI does. Precedence, first found wins:
//   keys:     AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), then the profile
//             (AWS_PROFILE, else "default") in the credentials file, then in the config file;
//   region:   AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`, "us-east-1";
//   endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's `endpoint_url`;
//   addressing: the profile's `s3 = addressing_style = virtual|path`, else virtual-host for AWS
//             (no endpoint) and path-style for a custom endpoint.
// Files: AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials), AWS_CONFIG_FILE (default
// ~/.aws/config; profiles are `[profile NAME]` there, `[default]` for the default). A missing
// file is no error. `getenv` is injectable for tests.
// Errors: InvalidArgument naming the file of a malformed INI line, a profile named by
// AWS_PROFILE that neither file has, half a key pair (an access key id without its secret or the
// reverse, in the environment or in the profile: as the AWS CLI's PartialCredentialsError, never
// a fall-back to other keys), or an endpoint (naming the variable or profile it came from) that
// does not start with http:// or https://.
Result<AwsSettings> LoadAwsSettings(const std::function<const char*(const char*)>& getenv =
                                        [](const char* n) { return std::getenv(n); });

// The HTTP(S) URL a request for `url` goes to under `aws` (path-style or virtual-host for s3://,
// the URL itself for http(s)://). Keys are percent-encoded except '/'.
std::string RequestUrl(const RemoteUrl& url, const AwsSettings& aws);

}  // namespace kiln::remote

#endif  // KILN_READER_REMOTE_REMOTE_URL_H_
