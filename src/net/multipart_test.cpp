#include "net/multipart.h"

#include <gtest/gtest.h>

#include "core/random.h"

namespace tokenscope::net {
namespace {

std::string binary(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng.next_u64());
  return out;
}

TEST(Multipart, RoundTripsFieldsAndAFileOfAnyBytes) {
  // The file holds CRLFs, dashes and NULs: everything but the boundary itself.
  std::string wav = binary(5000, 7) + "\r\n--\r\n\r\n--tokenscope" + std::string(3, '\0');
  const std::vector<FormPart> parts = {{"file", wav, "audio.wav", "audio/wav"},
                                       {"model", "whisper-1"},
                                       {"response_format", "verbose_json"},
                                       {"empty", ""}};
  const std::string boundary = multipart_boundary(parts, 42);
  EXPECT_EQ(boundary.rfind("tokenscope-", 0), 0u);
  EXPECT_EQ(boundary.size(), 11u + 32u);
  const std::string body = multipart_body(parts, boundary);
  const auto r = parse_multipart(multipart_content_type(boundary), body);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.parts.size(), 4u);
  EXPECT_EQ(r.parts[0].name, "file");
  EXPECT_TRUE(r.parts[0].has_filename);
  EXPECT_EQ(r.parts[0].filename, "audio.wav");
  EXPECT_EQ(r.parts[0].content_type, "audio/wav");
  EXPECT_EQ(r.parts[0].data, wav);
  EXPECT_EQ(r.parts[1].name, "model");
  EXPECT_FALSE(r.parts[1].has_filename);
  EXPECT_EQ(r.parts[1].data, "whisper-1");
  EXPECT_EQ(r.parts[2].data, "verbose_json");
  EXPECT_EQ(r.parts[3].data, "");
}

TEST(Multipart, TheBoundaryNeverOccursInTheData) {
  // A part that holds the boundary the seed draws first: the builder draws another.
  const std::vector<FormPart> probe = {{"x", "y"}};
  const std::string first = multipart_boundary(probe, 9);
  const std::string data = "before" + first + "after";
  const std::vector<FormPart> parts = {{"file", data, "a.wav"}};
  const std::string boundary = multipart_boundary(parts, 9);
  EXPECT_NE(boundary, first);
  EXPECT_EQ(data.find(boundary), std::string::npos);
  const std::string body = multipart_body(parts, boundary);  // the parts' data are views into it
  const auto r = parse_multipart(multipart_content_type(boundary), body);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.parts.at(0).data, data);
  // Many random files: each parses back whole.
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    const std::string bytes = binary(1 + seed * 37, seed);
    const std::string n = std::to_string(seed);  // FormPart holds views: the strings outlive it
    const std::vector<FormPart> p = {{"file", bytes, "f.bin"}, {"n", n}};
    const std::string b = multipart_boundary(p, seed);
    const std::string body = multipart_body(p, b);
    const auto back = parse_multipart("multipart/form-data; boundary=\"" + b + "\"", body);
    ASSERT_TRUE(back.ok()) << back.error;
    ASSERT_EQ(back.parts.size(), 2u);
    EXPECT_EQ(back.parts[0].data, bytes);
  }
}

TEST(Multipart, NamesAreEscapedAndReadBack) {
  const std::vector<FormPart> parts = {{"we\"ird\r\nname", "v", "a \"b\".wav"}};
  const std::string b = multipart_boundary(parts, 1);
  const std::string body = multipart_body(parts, b);
  EXPECT_NE(body.find("name=\"we%22ird%0D%0Aname\""), std::string::npos) << body;
  const auto r = parse_multipart(multipart_content_type(b), body);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.parts[0].name, "we%22ird%0D%0Aname");
  EXPECT_EQ(r.parts[0].filename, "a %22b%22.wav");
}

TEST(Multipart, ToleratesPreambleEpilogueTransportPaddingAndOtherHeaders) {
  const std::string body =
      "This is the preamble.\r\n--XyZ  \r\ncontent-disposition: Form-Data; name=model\r\n"
      "X-Other: 1\r\n\r\nm\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"q\\\"uoted.wav\"\r\n\r\nDATA\r\n--XyZ--\r\nepilogue";
  const auto r = parse_multipart("Multipart/Form-Data ; charset=utf-8; Boundary=XyZ", body);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.parts.size(), 2u);
  EXPECT_EQ(r.parts[0].name, "model");
  EXPECT_EQ(r.parts[0].data, "m");
  EXPECT_EQ(r.parts[1].filename, "q\"uoted.wav");
  EXPECT_EQ(r.parts[1].data, "DATA");
}

// Hostile and broken bodies: each refused with a message that says what is wrong.
TEST(Multipart, BadBodiesAreRefusedWithTheReason) {
  const std::string ct = "multipart/form-data; boundary=B";
  const std::string good = "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--\r\n";
  ASSERT_TRUE(parse_multipart(ct, good).ok());
  struct Case {
    std::string content_type, body, expect;
  };
  const std::vector<Case> cases = {
      {"application/json", good, "expected Content-Type multipart/form-data, got 'application/json'"},
      {"", good, "got none"},
      {"multipart/form-data", good, "without a boundary parameter"},
      {"multipart/form-data; boundary=", good, "is not 1 to 70"},
      {"multipart/form-data; boundary=" + std::string(71, 'b'), good, "is not 1 to 70"},
      {"multipart/form-data; boundary=\"a<b\"", good, "is not 1 to 70"},
      {"multipart/form-data; boundary=\"open", good, "unterminated quoted value"},
      {ct, "no delimiter here", "no boundary line '--B'"},
      {ct, "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1", "ends before the next boundary"},
      {ct, good.substr(0, good.size() - 8), "ends before the next boundary"},
      {ct, "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B", "without the closing"},
      {ct, "--B\r\nContent-Disposition: form-data; name=\"a\"", "ends inside its headers"},
      {ct, "--B\r\nContent-Disposition: form-data\r\n\r\n1\r\n--B--", "part 0 has no name"},
      {ct, "--B\r\nContent-Disposition: form-data; name=\"\"\r\n\r\n1\r\n--B--", "part 0 has no name"},
      {ct, "--B\r\nContent-Type: text/plain\r\n\r\n1\r\n--B--", "has no Content-Disposition"},
      {ct, "--B\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\n1\r\n--B--", "is not form-data"},
      {ct, "--B\r\nContent-Disposition: form-data; name=\"a\"; name=\"b\"\r\n\r\n1\r\n--B--", "two name"},
      {ct, "--B\r\nX-Note: a\r\n b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--",
       "folded header"},
      {ct, "--B\r\nno colon\r\n\r\n1\r\n--B--", "has no name"},
      {ct, "--Bx\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B--", "not followed by CRLF"},
      // The boundary inside a part's data ends the part there: what follows is no delimiter line.
      {ct, "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--BOOM\r\n--B--",
       "part 1: the boundary line is not followed by CRLF"},
  };
  for (const auto& c : cases) {
    const auto r = parse_multipart(c.content_type, c.body);
    EXPECT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.error.find(c.expect), std::string::npos) << "body " << c.body << "\nerror: " << r.error;
    EXPECT_TRUE(r.parts.empty());
  }
}

TEST(Multipart, LimitsBoundPartsHeadersFieldsAndFiles) {
  MultipartLimits limits;
  limits.max_parts = 3;
  limits.max_header_bytes = 100;
  limits.max_field_bytes = 10;
  limits.max_file_bytes = 20;
  std::vector<FormPart> parts(4, FormPart{"f", "v"});
  std::string b = multipart_boundary(parts, 3);
  auto r = parse_multipart(multipart_content_type(b), multipart_body(parts, b), limits);
  EXPECT_NE(r.error.find("more than 3 parts"), std::string::npos) << r.error;
  const std::string x11(11, 'x'), x20(20, 'x'), x21(21, 'x');  // FormPart holds views of them
  parts = {{"field", x11}};
  r = parse_multipart(multipart_content_type(b), multipart_body(parts, b), limits);
  EXPECT_NE(r.error.find("11 bytes, over the limit of 10 for a field"), std::string::npos) << r.error;
  parts = {{"file", x20, "a.wav"}};
  EXPECT_TRUE(parse_multipart(multipart_content_type(b), multipart_body(parts, b), limits).ok());
  parts = {{"file", x21, "a.wav"}};
  r = parse_multipart(multipart_content_type(b), multipart_body(parts, b), limits);
  EXPECT_NE(r.error.find("21 bytes, over the limit of 20 for a file"), std::string::npos) << r.error;
  const std::string long_name(200, 'n');
  parts = {{long_name, "v"}};
  r = parse_multipart(multipart_content_type(b), multipart_body(parts, b), limits);
  EXPECT_NE(r.error.find("headers over 100 bytes"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace tokenscope::net
