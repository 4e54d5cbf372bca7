// Tests for formats/status.h: codes, messages, context, Result and the helper macros.
#include "formats/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>

namespace kiln {
namespace {

TEST(StatusTest, DefaultIsOkWithoutMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, EveryFactoryHasItsCodeAndName) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), StatusCode::kInvalidArgument, "InvalidArgument"},
      {Status::NotFound("m"), StatusCode::kNotFound, "NotFound"},
      {Status::Corruption("m"), StatusCode::kCorruption, "Corruption"},
      {Status::IOError("m"), StatusCode::kIOError, "IOError"},
      {Status::NotSupported("m"), StatusCode::kNotSupported, "NotSupported"},
      {Status::OutOfRange("m"), StatusCode::kOutOfRange, "OutOfRange"},
      {Status::Cancelled("m"), StatusCode::kCancelled, "Cancelled"},
      {Status::Internal("m"), StatusCode::kInternal, "Internal"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.name;
    EXPECT_EQ(c.status.code(), c.code) << c.name;
    EXPECT_EQ(StatusCodeName(c.code), c.name);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
}

TEST(StatusTest, FromErrnoMapsEnoentToNotFoundAndNamesThePath) {
  Status s = Status::FromErrno("cannot open", "/data/x.kiln", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind("cannot open /data/x.kiln: ", 0), 0u) << s.message();
  Status e = Status::FromErrno("cannot write", "/data/y", EACCES);
  EXPECT_EQ(e.code(), StatusCode::kIOError);
  EXPECT_NE(e.message().find("/data/y"), std::string::npos);
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = Status::Corruption("checksum mismatch").WithContext("a.kiln record 3");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "a.kiln record 3: checksum mismatch");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
  EXPECT_EQ(Status::Ok().WithContext("ignored").message(), "");
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> v(42);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_TRUE(v.status().ok());
  Result<int> e(Status::NotFound("nope"));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  Result<std::unique_ptr<int>> moved(std::make_unique<int>(7));
  std::unique_ptr<int> p = std::move(moved).value();
  EXPECT_EQ(*p, 7);
  Result<std::string> s(std::string("abc"));
  EXPECT_EQ(s->size(), 3u);
}

#ifdef NDEBUG
TEST(ResultTest, OkStatusWithoutValueBecomesInternal) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}
#endif

Status Fails() { return Status::IOError("disk"); }
Status Succeeds() { return Status::Ok(); }
Result<int> Value(bool ok) {
  if (!ok) return Status::OutOfRange("too far");
  return 5;
}

Status UsesReturnIfError(bool fail, int* reached) {
  KILN_RETURN_IF_ERROR(Succeeds());
  *reached = 1;
  if (fail) KILN_RETURN_IF_ERROR(Fails());
  *reached = 2;
  return Status::Ok();
}

Status UsesAssignOrReturn(bool ok, int* out) {
  KILN_ASSIGN_OR_RETURN(int v, Value(ok));
  KILN_ASSIGN_OR_RETURN(int w, Value(true));  // two on one function: distinct temporaries
  *out = v + w;
  return Status::Ok();
}

TEST(StatusMacrosTest, ReturnIfErrorPropagates) {
  int reached = 0;
  EXPECT_EQ(UsesReturnIfError(true, &reached).code(), StatusCode::kIOError);
  EXPECT_EQ(reached, 1);
  EXPECT_TRUE(UsesReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 2);
}

TEST(StatusMacrosTest, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(UsesAssignOrReturn(true, &out).ok());
  EXPECT_EQ(out, 10);
  Status s = UsesAssignOrReturn(false, &out);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "too far");
}

TEST(StatusLocationTest, NoLocationByDefault) {
  const Status s = Status::Corruption("bad bytes");
  EXPECT_TRUE(s.location().empty());
  EXPECT_EQ(s.location().record, -1);
  EXPECT_EQ(s.location().offset, -1);
  EXPECT_EQ(s.reason(), "bad bytes");
  EXPECT_TRUE(Status::Ok().location().empty());
  EXPECT_TRUE(Status::Ok().WithLocation({"f", 1, 2}).ok());
  EXPECT_TRUE(Status::Ok().WithLocation({"f", 1, 2}).location().empty());
}

TEST(StatusLocationTest, WithLocationKeepsTheMessageWithoutAPrefix) {
  const Status s = Status::Corruption("/d/a.kiln: bad").WithLocation({"/d/a.kiln", -1, 64});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "/d/a.kiln: bad");
  EXPECT_EQ(s.location(), (ErrorLocation{"/d/a.kiln", -1, 64}));
  EXPECT_EQ(s.reason(), "/d/a.kiln: bad");
}

TEST(StatusLocationTest, WithLocationPrefixesTheMessageAndKeepsTheReason) {
  const Status s = Status::Corruption("checksum mismatch")
                       .WithLocation({"/d/a.kiln", 3, 128}, "/d/a.kiln record 3 (offset 128)");
  EXPECT_EQ(s.message(), "/d/a.kiln record 3 (offset 128): checksum mismatch");
  EXPECT_EQ(s.reason(), "checksum mismatch");
  EXPECT_EQ(s.location(), (ErrorLocation{"/d/a.kiln", 3, 128}));
  EXPECT_EQ(s.ToString(), "Corruption: /d/a.kiln record 3 (offset 128): checksum mismatch");
}

TEST(StatusLocationTest, ContextKeepsLocationAndReason) {
  const Status s =
      Status::IOError("short read").WithLocation({"/x", -1, 7}, "/x").WithContext("packing");
  EXPECT_EQ(s.message(), "packing: /x: short read");
  EXPECT_EQ(s.reason(), "short read");
  EXPECT_EQ(s.location(), (ErrorLocation{"/x", -1, 7}));
}

TEST(StatusLocationTest, InnerFieldsWinWhenMerged) {
  const Status inner = Status::Corruption("zstd: bad frame").WithLocation({"", -1, 900});
  const Status outer = inner.WithLocation({"/d/data.h5", 4, 100}, "/d/data.h5 sample 4");
  EXPECT_EQ(outer.location(), (ErrorLocation{"/d/data.h5", 4, 900}));
  EXPECT_EQ(outer.message(), "/d/data.h5 sample 4: zstd: bad frame");
  EXPECT_EQ(outer.reason(), "zstd: bad frame");
  EXPECT_EQ(inner.location(), (ErrorLocation{"", -1, 900})) << "the original is unchanged";
}

TEST(StatusLocationTest, WithFilePrefixesThePathAndNamesItInTheLocation) {
  const Status s = Status::Corruption("not an image").WithFile("dir/a.png");
  EXPECT_EQ(s.message(), "dir/a.png: not an image");
  EXPECT_EQ(s.reason(), "not an image");
  EXPECT_EQ(s.location(), ErrorLocation{"dir/a.png"});
  const Status unnamed = Status::Corruption("not an image").WithFile("");
  EXPECT_EQ(unnamed.message(), "not an image");
  EXPECT_TRUE(unnamed.location().empty());
  EXPECT_TRUE(Status::Ok().WithFile("dir/a.png").ok());
}

// A message that names its file already (built as "PATH: ...") is not prefixed a second time:
// kiln verify once printed "d4/kiln.json: d4/kiln.json: not a JSON object".
TEST(StatusLocationTest, WithFileNamesTheFileOnce) {
  const Status s = Status::Corruption("d/kiln.json: not a JSON object").WithFile("d/kiln.json");
  EXPECT_EQ(s.message(), "d/kiln.json: not a JSON object");
  EXPECT_EQ(s.reason(), "not a JSON object");
  EXPECT_EQ(s.location(), ErrorLocation{"d/kiln.json"});
  const Status twice = Status::Corruption("bad").WithFile("a.png").WithFile("a.png");
  EXPECT_EQ(twice.message(), "a.png: bad");
  EXPECT_EQ(twice.reason(), "bad");
  // Only the whole path followed by ": " counts; another file or a longer name is prefixed.
  EXPECT_EQ(Status::Corruption("a.png2: bad").WithFile("a.png").message(), "a.png: a.png2: bad");
  EXPECT_EQ(Status::Corruption("a.png").WithFile("a.png").message(), "a.png: a.png");
}

TEST(StatusLocationTest, FromErrnoNamesThePath) {
  const Status s = Status::FromErrno("cannot open", "/no/such", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.location(), ErrorLocation{"/no/such"});
  EXPECT_EQ(s.reason(), s.message());
}

}  // namespace
}  // namespace kiln
