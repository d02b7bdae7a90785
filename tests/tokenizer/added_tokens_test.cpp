// Added-token matching: leftmost-longest, raw vs normalized passes, single_word, lstrip, rstrip.
#include <gtest/gtest.h>

#include "tokenizer/added_vocabulary.h"

namespace fathom::tokenizer {
namespace {

struct Piece {
  std::string text;
  int32_t id;
  bool operator==(const Piece& other) const { return text == other.text && id == other.id; }
};
std::ostream& operator<<(std::ostream& os, const Piece& piece) { return os << "(" << piece.text << ", " << piece.id << ")"; }

std::vector<Piece> match(const std::vector<AddedToken>& tokens, const std::string& text) {
  std::vector<std::string> patterns;
  for (const AddedToken& token : tokens) patterns.push_back(token.content);
  AddedTokenMatcher matcher(tokens, patterns);
  RegexScratch scratch;
  std::vector<TextPiece> pieces;
  matcher.find(text, pieces, scratch);
  std::vector<Piece> out;
  for (const TextPiece& piece : pieces) out.push_back({text.substr(piece.begin, piece.end - piece.begin), piece.token_id});
  return out;
}

AddedToken token(std::string content, int32_t id, bool lstrip = false, bool rstrip = false, bool single_word = false) {
  AddedToken t;
  t.content = std::move(content);
  t.id = id;
  t.lstrip = lstrip;
  t.rstrip = rstrip;
  t.single_word = single_word;
  return t;
}

TEST(AddedTokens, SplitsAroundTokens) {
  auto pieces = match({token("my", 0, true, true), token("name", 1), token("ony", 2, false, false, true),
                       token("[CLS]", 3), token("[SEP]", 4)},
                      "[CLS] my name is anthony [SEP]");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}));
}

TEST(AddedTokens, LeftmostLongest) {
  auto pieces = match({token("<a>", 0), token("<a>b", 1), token("a>b", 2)}, "x<a>b<a>c");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"x", -1}, {"<a>b", 1}, {"<a>", 0}, {"c", -1}}));
}

TEST(AddedTokens, SingleWordNeedsNonWordNeighbours) {
  auto pieces = match({token("<mask>", 0, false, false, true)}, "<mask> My name <mask> A<mask> <mask>ony <mask>");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"<mask>", 0}, {" My name ", -1}, {"<mask>", 0}, {" A<mask> <mask>ony ", -1}, {"<mask>", 0}}));
  // Punctuation is not a word character; a combining mark is.
  pieces = match({token("<mask>", 0, false, false, true)}, "<mask>, <mask>- \u25cc\u0330<mask>");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- \u25cc\u0330<mask>", -1}}));
}

TEST(AddedTokens, StripsUnicodeWhitespaceWithoutOverlap) {
  auto pieces = match({token("<mask>", 0, true, true, true)}, "Hi <mask> there\t<mask>\t<mask>\u2000");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"Hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}));
  pieces = match({token("<m>", 0, true, false)}, "a  \n<m>b");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"a", -1}, {"  \n<m>", 0}, {"b", -1}}));
  pieces = match({token("<m>", 0, false, true)}, "a<m> \u3000 b");
  EXPECT_EQ(pieces, (std::vector<Piece>{{"a", -1}, {"<m> \u3000 ", 0}, {"b", -1}}));
}

TEST(AddedTokens, NoTokensMeansOnePiece) {
  EXPECT_EQ(match({token("<x>", 0)}, "plain text"), (std::vector<Piece>{{"plain text", -1}}));
  EXPECT_TRUE(match({token("<x>", 0)}, "").empty());
}

}  // namespace
}  // namespace fathom::tokenizer
