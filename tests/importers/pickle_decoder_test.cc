#include "src/importers/pickle_decoder.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pitstop::importers {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(PickleDecoderTest, DecodesDictListTupleAndMemo) {
  // pickle.dumps({'a': [1, -2, 300, 70000], 'b': ('x', None, True, 1.5),
  //               'c': <memo ref to the list>}, protocol=2), hand-assembled.
  std::string p;
  p = Bytes({0x80, 0x02, '}', 'q', 0x00, '('});
  p += "X" + Bytes({1, 0, 0, 0}) + "a";
  p += Bytes({']',  'q', 0x01, '(',  'K', 1,    'J',  0xfe, 0xff, 0xff,
              0xff, 'M', 0x2c, 0x01, 'J', 0x70, 0x11, 0x01, 0x00, 'e'});
  p += "X" + Bytes({1, 0, 0, 0}) + "b" + Bytes({'('});
  p += Bytes({0x8c, 1}) + "x" +
       Bytes({'N', 0x88, 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 't'});
  p += "X" + Bytes({1, 0, 0, 0}) + "c" + Bytes({'h', 0x01, 'u', '.'});
  auto doc = DecodePickle(p, "mem");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["a"], nlohmann::json({1, -2, 300, 70000}));
  EXPECT_EQ((*doc)["b"][0], "x");
  EXPECT_TRUE((*doc)["b"][1].is_null());
  EXPECT_EQ((*doc)["b"][2], true);
  EXPECT_DOUBLE_EQ((*doc)["b"][3].get<double>(), 1.5);
  // The memo returns the same (filled) list, as Python would.
  EXPECT_EQ((*doc)["c"], (*doc)["a"]);
}

TEST(PickleDecoderTest, Long1IsSignExtended) {
  std::string p = Bytes({0x80, 0x02, 0x8a, 0x02, 0x00, 0x80, '.'});
  auto doc = DecodePickle(p, "mem");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->get<int64_t>(), -32768);
  std::string big = Bytes({0x80, 0x02, 0x8a, 0x08, 0x8d, 0xa2, 0x3c, 0x0f, 0x3d,
                           0x7a, 0x66, 0x18, '.'});
  auto t = DecodePickle(big, "mem");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->get<int64_t>(), 0x18667a3d0f3ca28dLL);
}

TEST(PickleDecoderTest, RefusesGlobalWithOffset) {
  // pickle of os.system('true'): PROTO 2, GLOBAL 'os system', ...
  std::string p = Bytes({0x80, 0x02}) + "cos\nsystem\n" +
                  Bytes({'X', 4, 0, 0, 0}) + "true" + Bytes({0x85, 'R', '.'});
  auto doc = DecodePickle(p, "/tmp/evil.pkl");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(doc.status().message(), HasSubstr("/tmp/evil.pkl: offset 2"));
  EXPECT_THAT(doc.status().message(), HasSubstr("GLOBAL"));
  EXPECT_THAT(doc.status().message(), HasSubstr("refused"));
}

TEST(PickleDecoderTest, RefusesEveryCodeOpcode) {
  const struct {
    int op;
    const char* name;
  } kRefused[] = {{'c', "GLOBAL"},  {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"},
                  {'b', "BUILD"},   {'i', "INST"},          {'o', "OBJ"},
                  {0x81, "NEWOBJ"}, {0x92, "NEWOBJ_EX"},    {0x82, "EXT1"},
                  {'P', "PERSID"},  {'Q', "BINPERSID"}};
  for (const auto& r : kRefused) {
    std::string p = Bytes({0x80, 0x04, ']', r.op, '.'});
    auto doc = DecodePickle(p, "f");
    ASSERT_FALSE(doc.ok()) << r.name;
    EXPECT_THAT(doc.status().message(), HasSubstr(r.name));
    EXPECT_THAT(doc.status().message(), HasSubstr("offset 3"));
  }
}

TEST(PickleDecoderTest, TruncatedAndMalformedInputsFailCleanly) {
  EXPECT_THAT(DecodePickle("", "f").status().message(), HasSubstr("empty"));
  // BINUNICODE claiming 100 bytes with 3 left.
  std::string p = Bytes({0x80, 0x02, 'X', 100, 0, 0, 0}) + "abc";
  auto doc = DecodePickle(p, "f");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("offset 2"));
  // No STOP.
  EXPECT_THAT(DecodePickle(Bytes({0x80, 0x02, ']'}), "f").status().message(),
              HasSubstr("before STOP"));
  // Stack underflow, unknown memo, odd SETITEMS.
  EXPECT_FALSE(DecodePickle(Bytes({0x80, 0x02, 'a', '.'}), "f").ok());
  EXPECT_FALSE(DecodePickle(Bytes({0x80, 0x02, 'h', 9, '.'}), "f").ok());
  EXPECT_FALSE(
      DecodePickle(Bytes({0x80, 0x02, '}', '(', 'N', 'u', '.'}), "f").ok());
  EXPECT_FALSE(DecodePickle(Bytes({0x80, 0x02, 0xff, '.'}), "f").ok());
}

TEST(PickleDecoderTest, SelfReferenceDoesNotLoopForever) {
  // l = []; l.append(l)
  std::string p = Bytes({0x80, 0x02, ']', 'q', 0x00, 'h', 0x00, 'a', '.'});
  auto doc = DecodePickle(p, "f");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("cycle"));
}

TEST(PickleDecoderTest, SharedReferenceBlowupIsBounded) {
  // a0 = [], a_{k+1} = [a_k, a_k] 40 times: 2^40 values if expanded.
  std::string p = Bytes({0x80, 0x02, ']', 'q', 0, '0'});
  for (int k = 0; k < 40; ++k) {
    p += Bytes({'h', k, 'h', k, 0x86, 'q', k + 1, '0'});
  }
  p += Bytes({'h', 40, '.'});
  auto doc = DecodePickle(p, "f");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("too many values"));
}

}  // namespace
}  // namespace pitstop::importers
