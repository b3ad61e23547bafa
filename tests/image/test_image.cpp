// Checkpoint images: every element type and shape round trips byte for byte
// with its attributes; all-zero chunks are left out of the file; bad calls
// are refused without side effects; truncated, random, damaged or too new
// images are refused with CorruptData saying what is wrong.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "reprise/error.hpp"
#include "reprise/image.hpp"
#include "reprise/version.hpp"

using namespace reprise;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// `size` random bytes, none of them zero (so that every chunk is written).
std::vector<std::byte> random_bytes(std::size_t size, std::uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> byte(1, 255);
  std::vector<std::byte> bytes(size);
  for (std::byte& b : bytes) b = static_cast<std::byte>(byte(random));
  return bytes;
}

ImageInfo sample_info() {
  ImageInfo info;
  info.original_rank = OriginalRank{3};
  info.world_size = 8;
  info.checkpoint_id = 42;
  return info;
}

/// An image of one piece `name` holding `bytes`.
ImageBytes image_of(std::string_view name, std::span<const std::byte> bytes) {
  ImageBuilder builder(sample_info(), bytes.size());
  builder.add(name, bytes);
  return std::move(builder).finish();
}

/// The message of the `CorruptData` that opening `bytes` raises ("" if none).
std::string corrupt_message(std::span<const std::byte> bytes) {
  try {
    const Image image = Image::view(bytes);
    image.verify();
  } catch (const CorruptData& error) {
    return error.what();
  }
  return "";
}

/// `image` changed through HDF5 itself: `change` gets the root group of the
/// image written to a file and opened for writing; the file's bytes after
/// it is closed come back.
template <class Change>
std::vector<std::byte> rewritten(const ImageBytes& image, Change change) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("reprise-rewritten-" + std::to_string(::getpid()) + ".h5");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(file, 0);
  change(file);
  H5Fclose(file);
  std::vector<std::byte> out(std::filesystem::file_size(path));
  std::ifstream(path, std::ios::binary)
      .read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  std::filesystem::remove(path);
  return out;
}

template <class T>
void expect_round_trip(std::vector<T> values) {
  const ElementType type = element_type_of<T>();
  SCOPED_TRACE(std::string(element_type_name(type)));
  ImageBuilder builder(sample_info());
  builder.add_array<T>("values", values);
  const Image image = Image::open(std::move(builder).finish());
  const ImageDataset& piece = image.dataset("values");
  EXPECT_EQ(piece.shape.type, type);
  EXPECT_EQ(piece.shape.extents, std::vector<std::uint64_t>{values.size()});
  EXPECT_EQ(piece.bytes, values.size() * sizeof(T));
  EXPECT_EQ(image.read_array<T>("values"), values);
}

}  // namespace

TEST(Image, EveryElementTypeRoundTrips) {
  expect_round_trip<std::byte>({std::byte{1}, std::byte{0}, std::byte{255}});
  expect_round_trip<std::int8_t>({-128, 0, 127});
  expect_round_trip<std::uint8_t>({0, 1, 255});
  expect_round_trip<std::int16_t>({-32768, -1, 32767});
  expect_round_trip<std::uint16_t>({0, 65535, 7});
  expect_round_trip<std::int32_t>({std::numeric_limits<std::int32_t>::min(), -5, 1 << 30});
  expect_round_trip<std::uint32_t>({0, 0xffffffffU, 12345});
  expect_round_trip<std::int64_t>({std::numeric_limits<std::int64_t>::min(), -1, std::int64_t{1} << 62});
  expect_round_trip<std::uint64_t>({0, ~std::uint64_t{0}, 99});
  expect_round_trip<float>({-1.5F, 0.0F, 3.25e30F});
  expect_round_trip<double>({-0.0, 1e-300, 6.02214076e23, std::numeric_limits<double>::infinity()});
}

TEST(Image, RootAttributesRoundTrip) {
  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  ImageInfo info = sample_info();
  info.format_version = 99;  // filled in by the builder, like the version and time
  const Image image = Image::open(ImageBuilder(info).finish());
  EXPECT_EQ(image.info().format_version, kImageFormatVersion);
  EXPECT_EQ(image.info().library_version, kVersion);
  EXPECT_EQ(image.info().original_rank, OriginalRank{3});
  EXPECT_EQ(image.info().world_size, 8);
  EXPECT_EQ(image.info().checkpoint_id, 42U);
  EXPECT_GE(image.info().unix_time, before - 1);
  EXPECT_LE(image.info().unix_time, before + 60);
  EXPECT_FALSE(image.info().step.has_value()) << "no step given, none written";
  EXPECT_TRUE(image.datasets().empty());
}

TEST(Image, TheApplicationsStepIsARootAttributeWhereGiven) {
  ImageInfo info = sample_info();
  info.step = std::uint64_t{1} << 40;
  const Image image = Image::open(ImageBuilder(info).finish());
  ASSERT_TRUE(image.info().step.has_value());
  EXPECT_EQ(*image.info().step, std::uint64_t{1} << 40);
}

TEST(Image, TwoDimensionalArrayKeepsItsShape) {
  double grid[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) grid[i][j] = i * 10 + j + 0.5;
  }
  ImageBuilder builder(sample_info());
  builder.add_array<double>("grid", std::span<const double>(&grid[0][0], 12), {3, 4});
  const Image image = Image::open(std::move(builder).finish());
  EXPECT_EQ(image.dataset("grid").shape.extents, (std::vector<std::uint64_t>{3, 4}));
  const std::vector<double> back = image.read_array<double>("grid");
  EXPECT_EQ(std::memcmp(back.data(), grid, sizeof grid), 0);
}

TEST(Image, PiecesComeBackInTheOrderAdded) {
  ImageBuilder builder(sample_info());
  for (const char* name : {"zeta", "alpha", "mid", "beta"}) builder.add(name, random_bytes(10, 1));
  const Image image = Image::open(std::move(builder).finish());
  std::vector<std::string> names;
  for (const ImageDataset& piece : image.datasets()) names.push_back(piece.name);
  EXPECT_EQ(names, (std::vector<std::string>{"zeta", "alpha", "mid", "beta"}));
  EXPECT_TRUE(image.contains("mid"));
  EXPECT_FALSE(image.contains("gamma"));
}

TEST(Image, EmptyPieces) {
  ImageBuilder builder(sample_info());
  builder.add("nothing", {});
  builder.add_array<double>("no_rows", {}, {0, 5});
  const Image image = Image::open(std::move(builder).finish());
  EXPECT_EQ(image.dataset("nothing").bytes, 0U);
  EXPECT_EQ(image.dataset("nothing").shape.extents, std::vector<std::uint64_t>{0});
  EXPECT_EQ(image.dataset("no_rows").shape.extents, (std::vector<std::uint64_t>{0, 5}));
  EXPECT_TRUE(image.read("nothing").empty());
  EXPECT_TRUE(image.read_array<double>("no_rows").empty());
  image.verify();
}

TEST(Image, ExactBytesBackAcrossChunksAndAShortLastChunk) {
  // 1-D bytes over several chunks with a short last one, and a 2-D array
  // whose rows are larger than a chunk (one row per chunk).
  const std::vector<std::byte> bytes = random_bytes(3 * kMiB + 12345, 7);
  std::vector<double> wide(3 * 300'001);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<double>(i) * 0.25 + 1;
  ImageBuilder builder(sample_info(), bytes.size() + wide.size() * sizeof(double));
  builder.add("bytes", bytes);
  builder.add_array<double>("wide", wide, {3, 300'001});
  const Image image = Image::open(std::move(builder).finish());
  EXPECT_EQ(image.read("bytes"), bytes);
  EXPECT_EQ(image.read_array<double>("wide"), wide);
}

namespace {

/// `pieces` back to back, as a receiver of a gather gets them.
ImageBytes gathered(const ImagePieces& pieces) {
  ImageBytes whole = ImageBytes::allocate(pieces.size());
  std::size_t at = 0;
  for (const auto piece : pieces.pieces) {
    std::memcpy(whole.data() + at, piece.data(), piece.size());
    at += piece.size();
  }
  return whole;
}

}  // namespace

// Pieces added by reference (dense, over several chunks with a short last
// one, 1-D and 2-D) between copied ones: the pieces of the image lie in the
// caller's memory, nothing of them is copied, and what arrives back to back
// is an ordinary image that reads every byte back and verifies.
TEST(Image, ReferencedPiecesAreSentFromTheirMemoryAndArriveAsAnImage) {
  const std::vector<std::byte> big = random_bytes(3 * kMiB + 12345, 11);
  std::vector<double> wide(3 * 300'001);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<double>(i) * 0.5 + 1;
  const std::vector<std::byte> small = random_bytes(1000, 12);
  ImageBuilder builder(sample_info(), small.size(), 2);
  builder.add_referenced("big", big);
  builder.add("small", small);
  builder.add_referenced("wide", std::as_bytes(std::span(wide)), ArrayShape{ElementType::kFloat64, {3, 300'001}});
  const ImagePieces pieces = std::move(builder).finish_pieces();
  // Every byte of both referenced pieces is sent from where it lies.
  std::size_t from_big = 0;
  std::size_t from_wide = 0;
  const auto* wide_bytes = reinterpret_cast<const std::byte*>(wide.data());
  for (const auto piece : pieces.pieces) {
    if (piece.data() >= big.data() && piece.data() < big.data() + big.size()) from_big += piece.size();
    if (piece.data() >= wide_bytes && piece.data() < wide_bytes + wide.size() * sizeof(double))
      from_wide += piece.size();
  }
  EXPECT_EQ(from_big, big.size());
  EXPECT_EQ(from_wide, wide.size() * sizeof(double));
  EXPECT_LT(pieces.own.size(), 2 * kMiB) << "the image's own memory holds metadata, not the referenced pieces";
  const Image image = Image::open(gathered(pieces));
  image.verify();
  EXPECT_EQ(image.read("big"), big);
  EXPECT_EQ(image.read("small"), small);
  EXPECT_EQ(image.read_array<double>("wide"), wide);
  EXPECT_EQ(image.dataset("wide").shape.extents, (std::vector<std::uint64_t>{3, 300'001}));
  EXPECT_EQ(image.info().checkpoint_id, 42U);
}

// What a new process needs to land referenced pieces in its own memory:
// `referenced` names exactly the pieces that lie in the caller's memory,
// `chunks` tells where each chunk of a piece lies in the image (the same
// places), zero chunks are not stored, and `verify(name, bytes)` checks a
// piece held elsewhere.
TEST(Image, ChunksSayWhereEachPartOfAPieceLies) {
  const std::vector<std::byte> big = random_bytes(3 * kMiB + 12345, 15);
  std::vector<std::byte> sparse = random_bytes(3 * kMiB, 16);
  std::memset(sparse.data() + kMiB, 0, kMiB);
  ImageBuilder builder(sample_info(), sparse.size(), 1);
  builder.add_referenced("big", big);
  builder.add("sparse", sparse);
  const ImagePieces pieces = std::move(builder).finish_pieces();
  std::size_t referenced_bytes = 0;
  for (const std::size_t index : pieces.referenced) {
    ASSERT_LT(index, pieces.pieces.size());
    const auto piece = pieces.pieces[index];
    EXPECT_TRUE(piece.data() >= big.data() && piece.data() + piece.size() <= big.data() + big.size());
    referenced_bytes += piece.size();
  }
  EXPECT_EQ(referenced_bytes, big.size());
  const ImageBytes whole = gathered(pieces);
  const Image image = Image::view(whole.span());
  // Offsets of the referenced pieces in the image, from the pieces' order.
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < pieces.pieces.size(); ++i) {
    if (std::find(pieces.referenced.begin(), pieces.referenced.end(), i) != pieces.referenced.end())
      offsets.push_back(at);
    at += pieces.pieces[i].size();
  }
  std::vector<std::byte> landed(big.size());
  std::size_t covered = 0;
  for (const ImageChunk& chunk : image.chunks("big")) {
    ASSERT_TRUE(chunk.stored);
    EXPECT_NE(std::find(offsets.begin(), offsets.end(), chunk.image_offset), offsets.end())
        << "a chunk of 'big' at " << chunk.image_offset << " is not a referenced piece";
    std::memcpy(landed.data() + chunk.piece_offset, whole.data() + chunk.image_offset, chunk.bytes);
    covered += chunk.bytes;
  }
  EXPECT_EQ(covered, big.size());
  EXPECT_EQ(landed, big);
  EXPECT_NO_THROW(image.verify("big", landed));
  landed[kMiB + 3] ^= std::byte{1};
  EXPECT_THROW(image.verify("big", landed), CorruptData);
  EXPECT_THROW(image.verify("big", std::span(landed).first(10)), UsageError);
  const auto sparse_chunks = image.chunks("sparse");
  ASSERT_EQ(sparse_chunks.size(), 3U);
  EXPECT_TRUE(sparse_chunks[0].stored);
  EXPECT_FALSE(sparse_chunks[1].stored) << "a zero chunk is not stored";
  EXPECT_EQ(sparse_chunks[1].piece_offset, kMiB);
  EXPECT_NO_THROW(image.verify("sparse"));
}

// finish() of a builder with referenced pieces copies them in: the same image.
TEST(Image, FinishCopiesReferencedPieces) {
  const std::vector<std::byte> big = random_bytes(2 * kMiB + 7, 13);
  ImageBuilder builder(sample_info(), 0, 1);
  builder.add_referenced("big", big);
  const Image image = Image::open(std::move(builder).finish());
  image.verify();
  EXPECT_EQ(image.read("big"), big);
}

// A referenced piece with an all-zero chunk is copied at once, so that the
// chunk is left out; the caller's memory may change afterwards.
TEST(Image, AReferencedPieceWithAZeroChunkIsCopiedAndLeavesItOut) {
  std::vector<std::byte> sparse = random_bytes(4 * kMiB, 14);
  std::memset(sparse.data() + kMiB, 0, kMiB);
  const std::vector<std::byte> expected = sparse;
  ImageBuilder builder(sample_info(), sparse.size(), 1);
  builder.add_referenced("sparse", sparse);
  std::fill(sparse.begin(), sparse.end(), std::byte{1});
  const ImagePieces pieces = std::move(builder).finish_pieces();
  EXPECT_LT(pieces.size(), 3 * kMiB + 256 * 1024) << "the zero chunk is left out";
  const Image image = Image::open(gathered(pieces));
  EXPECT_EQ(image.read("sparse"), expected);
  EXPECT_THROW(ImageBuilder(sample_info())
                   .add_referenced("sparse", std::span(sparse).first(3), ArrayShape{ElementType::kFloat64, {}}),
               UsageError)
      << "a size that is not a whole number of elements";
}

TEST(Image, AllZeroPieceTakesNoSpace) {
  const std::vector<std::byte> zeros(64 * kMiB);
  const ImageBytes bytes = image_of("zeros", zeros);
  EXPECT_LT(bytes.size(), 4096U) << "the image holds chunks of zeros";
  const Image image = Image::view(bytes.span());
  EXPECT_EQ(image.dataset("zeros").bytes, zeros.size());
  EXPECT_EQ(image.read("zeros"), zeros);
}

TEST(Image, SparsePieceKeepsOnlyItsNonZeroChunks) {
  // 16 MiB, every other MiB zero: about half the bytes are written.
  std::vector<std::byte> sparse = random_bytes(16 * kMiB, 3);
  for (std::size_t mib = 0; mib < 16; mib += 2) std::memset(sparse.data() + mib * kMiB, 0, kMiB);
  const ImageBytes bytes = image_of("sparse", sparse);
  EXPECT_GE(bytes.size(), 8 * kMiB);
  EXPECT_LT(bytes.size(), 8 * kMiB + 256 * 1024);
  EXPECT_EQ(Image::view(bytes.span()).read("sparse"), sparse);
}

TEST(Image, VerifyChecksSparseAndZeroPiecesWhereTheyLie) {
  // Chunks written and chunks left out (zeros) hashed in place, in order.
  std::vector<std::byte> sparse = random_bytes(6 * kMiB + 999, 21);
  for (std::size_t mib = 1; mib < 6; mib += 2) std::memset(sparse.data() + mib * kMiB, 0, kMiB);
  ImageBuilder builder(sample_info(), sparse.size());
  builder.add("sparse", sparse);
  builder.add("zeros", std::vector<std::byte>(3 * kMiB));
  builder.add("empty", std::span<const std::byte>{});
  ImageBytes image = std::move(builder).finish();
  EXPECT_NO_THROW(Image::view(image.span()).verify());
  // A flipped byte in the last, written chunk is found by verify, in place.
  const auto found = std::search(image.data(), image.data() + image.size(), sparse.end() - 600, sparse.end() - 536);
  ASSERT_NE(found, image.data() + image.size());
  found[7] ^= std::byte{0x40};
  try {
    Image::view(image.span()).verify();
    ADD_FAILURE() << "no error for a damaged piece";
  } catch (const CorruptData& error) {
    EXPECT_NE(std::string(error.what()).find("piece 'sparse' checksum mismatch"), std::string::npos) << error.what();
  }
}

TEST(Image, ReadUnverifiedCopiesWithoutTheChecksum) {
  std::vector<std::byte> data = random_bytes(2 * kMiB + 5, 22);
  ImageBytes image = image_of("piece", data);
  const auto found = std::search(image.data(), image.data() + image.size(), data.begin() + 100, data.begin() + 164);
  ASSERT_NE(found, image.data() + image.size());
  found[3] ^= std::byte{0x02};
  const Image opened = Image::view(image.span());
  std::vector<std::byte> out(data.size());
  opened.read_unverified("piece", out);
  std::vector<std::byte> expected = data;
  expected[103] ^= std::byte{0x02};
  EXPECT_EQ(out, expected) << "every byte as stored, the damaged one too";
  EXPECT_THROW(opened.read("piece", out), CorruptData);
  std::vector<std::byte> short_buffer(data.size() - 1);
  EXPECT_THROW(opened.read_unverified("piece", short_buffer), UsageError);
}

TEST(Image, BadNamesAndShapesAreRefused) {
  ImageBuilder builder(sample_info());
  builder.add("taken", random_bytes(8, 1));
  const std::vector<std::byte> eight = random_bytes(8, 2);
  EXPECT_THROW(builder.add("taken", eight), UsageError);
  EXPECT_THROW(builder.add("", eight), UsageError);
  EXPECT_THROW(builder.add("a/b", eight), UsageError);
  EXPECT_THROW(builder.add(".", eight), UsageError);
  EXPECT_THROW(builder.add("odd", eight, ArrayShape{ElementType::kFloat64, {2}}), UsageError);
  EXPECT_THROW(builder.add("odd", random_bytes(6, 2), ArrayShape{ElementType::kInt32, {}}), UsageError);
  try {
    builder.add("taken", eight);
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("already has a piece named 'taken'"), std::string::npos) << error.what();
  }
  // Nothing refused made it into the image.
  const Image image = Image::open(std::move(builder).finish());
  ASSERT_EQ(image.datasets().size(), 1U);
  EXPECT_THROW(builder.add("late", eight), UsageError);
}

TEST(Image, WrongBufferSizeIsRefusedAndLeavesItUntouched) {
  const std::vector<std::byte> bytes = random_bytes(100, 4);
  const ImageBytes image_bytes = image_of("piece", bytes);
  const Image image = Image::view(image_bytes.span());
  for (const std::size_t size : {std::size_t{0}, std::size_t{99}, std::size_t{101}}) {
    std::vector<std::byte> out(size, std::byte{0xab});
    EXPECT_THROW(image.read("piece", out), UsageError);
    EXPECT_EQ(out, std::vector<std::byte>(size, std::byte{0xab}));
  }
  try {
    (void)image.read("missing");
    ADD_FAILURE() << "no error for a missing piece";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("no piece 'missing' in the image (it holds piece)"), std::string::npos)
        << error.what();
  }
}

TEST(Image, ReadArrayOfAnotherTypeIsRefused) {
  ImageBuilder builder(sample_info());
  builder.add_array<double>("doubles", std::vector<double>{1, 2});
  const Image image = Image::open(std::move(builder).finish());
  try {
    (void)image.read_array<std::int32_t>("doubles");
    ADD_FAILURE() << "no error for the wrong type";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("holds float64, not int32"), std::string::npos) << error.what();
  }
  EXPECT_THROW((void)image.read_array<std::int64_t>("doubles"), UsageError);
}

TEST(Image, TruncatedImagesAreRefused) {
  const ImageBytes image = image_of("piece", random_bytes(3 * kMiB, 5));
  const std::span<const std::byte> bytes = image.span();
  for (const std::size_t cut : {std::size_t{0}, std::size_t{5}, std::size_t{8}, std::size_t{30}, std::size_t{200},
                                bytes.size() / 2, bytes.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    const std::string message = corrupt_message(bytes.first(cut));
    // Inside the superblock the image's size is not known yet.
    const std::string expected =
        cut < 8    ? "not an HDF5 file: its " + std::to_string(cut) + " bytes"
        : cut < 64 ? "truncated at " + std::to_string(cut) + " "
                   : "truncated at " + std::to_string(cut) + " of " + std::to_string(bytes.size()) + " bytes";
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(Image, RandomBytesAreRefused) {
  const std::vector<std::byte> noise = random_bytes(1 << 16, 6);
  const std::string message = corrupt_message(noise);
  EXPECT_NE(message.find("not an HDF5 file"), std::string::npos) << message;
}

TEST(Image, AFlippedByteInAPieceIsFound) {
  std::vector<std::byte> data = random_bytes(2 * kMiB, 8);
  ImageBytes image = image_of("piece", data);
  // The piece's bytes lie as they are in the image: flip one in the middle.
  const auto found = std::search(image.data(), image.data() + image.size(), data.begin() + 4096, data.begin() + 4160);
  ASSERT_NE(found, image.data() + image.size());
  found[32] ^= std::byte{0x10};
  const Image opened = Image::view(image.span());
  try {
    (void)opened.read("piece");
    ADD_FAILURE() << "no error for a damaged piece";
  } catch (const CorruptData& error) {
    EXPECT_NE(std::string(error.what()).find("piece 'piece' checksum mismatch"), std::string::npos) << error.what();
  }
  EXPECT_THROW(opened.verify(), CorruptData);
}

TEST(Image, ViewReadsTheCallersBytesInPlace) {
  // No copy: a byte changed after the image was opened is what a read sees.
  std::vector<std::byte> data = random_bytes(2 * kMiB, 13);
  ImageBytes image = image_of("piece", data);
  const Image opened = Image::view(image.span());
  const auto found = std::search(image.data(), image.data() + image.size(), data.begin() + 8192, data.begin() + 8256);
  ASSERT_NE(found, image.data() + image.size());
  found[1] ^= std::byte{0x01};
  EXPECT_THROW((void)opened.read("piece"), CorruptData);
  found[1] ^= std::byte{0x01};
  EXPECT_EQ(opened.read("piece"), data);
}

TEST(Image, ANewerFormatOrAMissingAttributeIsRefused) {
  const ImageBytes image = image_of("piece", random_bytes(100, 9));
  const std::vector<std::byte> newer = rewritten(image, [](hid_t file) {
    const hid_t attribute = H5Aopen(file, "reprise_format", H5P_DEFAULT);
    const std::uint32_t seven = 7;
    H5Awrite(attribute, H5T_NATIVE_UINT32, &seven);
    H5Aclose(attribute);
  });
  std::string message = corrupt_message(newer);
  EXPECT_NE(message.find("format version 7 is newer than this library reads (1)"), std::string::npos) << message;

  const std::vector<std::byte> unmarked = rewritten(image, [](hid_t file) { H5Adelete(file, "reprise_format"); });
  message = corrupt_message(unmarked);
  EXPECT_NE(message.find("no reprise_format attribute: not a reprise image"), std::string::npos) << message;

  const std::vector<std::byte> no_checksum =
      rewritten(image, [](hid_t file) { H5Adelete_by_name(file, "state/piece", "checksum", H5P_DEFAULT); });
  // Such a piece opens as one whose checksum travels apart, which the image
  // cannot check: refused by every check, never taken for intact.
  message = corrupt_message(no_checksum);
  EXPECT_NE(message.find("piece 'piece' has no checksum in the image"), std::string::npos) << message;
  const Image opened = Image::view(no_checksum);
  EXPECT_TRUE(opened.dataset("piece").checksum_apart);
  std::vector<std::byte> out(100, std::byte{7});
  EXPECT_THROW(opened.read("piece", out), CorruptData);
  EXPECT_EQ(out, std::vector<std::byte>(100, std::byte{7}));
  EXPECT_THROW(opened.verify("piece", random_bytes(100, 9)), CorruptData);
}

// A migration sends its checkpoint copies last: the image leaves their
// checksums out (nothing hashes them while it is built), and its holder
// reads them unchecked and checks them against the checksums sent apart.
TEST(Image, APieceWhoseChecksumIsApartIsInTheImageWithoutOne) {
  const std::vector<std::byte> kept = random_bytes(2 * kMiB, 21);
  const std::vector<std::byte> late = random_bytes(3 * kMiB + 5, 22);
  std::vector<std::byte> sparse_late = random_bytes(2 * kMiB, 23);
  std::memset(sparse_late.data(), 0, kMiB);  // copied, not referenced: apart all the same
  ImageBuilder builder(sample_info(), sparse_late.size(), 2);
  builder.add_referenced("kept", kept);
  builder.add_referenced("late", late, {}, ImageChecksum::kApart);
  builder.add_referenced("sparse late", sparse_late, {}, ImageChecksum::kApart);
  const ImageBytes whole = gathered(std::move(builder).finish_pieces());
  const Image image = Image::view(whole.span());
  EXPECT_FALSE(image.dataset("kept").checksum_apart);
  EXPECT_EQ(image.read("kept"), kept);
  const std::vector<std::pair<std::string, const std::vector<std::byte>*>> apart{{"late", &late},
                                                                                 {"sparse late", &sparse_late}};
  for (const auto& [name, bytes] : apart) {
    EXPECT_TRUE(image.dataset(name).checksum_apart) << name;
    std::vector<std::byte> out(bytes->size());
    image.read_unverified(name, out);
    EXPECT_EQ(out, *bytes) << name;
    EXPECT_THROW(image.verify(name), CorruptData) << name;
  }
  EXPECT_THROW(image.verify(), CorruptData);
}

TEST(Image, ReadFileNamesThePath) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("reprise-image-" + std::to_string(::getpid()) + ".h5");
  const std::vector<std::byte> data = random_bytes(1000, 10);
  {
    const ImageBytes image = image_of("piece", data);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  }
  EXPECT_EQ(Image::read_file(path).read("piece"), data);
  std::filesystem::resize_file(path, 100);
  try {
    (void)Image::read_file(path);
    ADD_FAILURE() << "no error for a truncated file";
  } catch (const CorruptData& error) {
    EXPECT_NE(std::string(error.what()).find(path.string() + ": "), std::string::npos) << error.what();
  }
  std::filesystem::remove(path);
  try {
    (void)Image::read_file(path);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const IoError& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
    EXPECT_EQ(error.system_error(), ENOENT);
  }
  try {
    (void)Image::read_file(path.parent_path());
    ADD_FAILURE() << "no error for a directory";
  } catch (const IoError& error) {
    EXPECT_EQ(error.system_error(), EISDIR) << error.what();
  }
}

TEST(Image, BytesCopiedOrReceivedOpen) {
  const std::vector<std::byte> data = random_bytes(5000, 11);
  const ImageBytes image = image_of("piece", data);
  ImageBytes received = ImageBytes::allocate(image.size());
  std::memcpy(received.data(), image.data(), image.size());
  EXPECT_EQ(Image::open(std::move(received)).read("piece"), data);
  EXPECT_EQ(Image::open(ImageBytes::copy_of(image.span())).read("piece"), data);
}

TEST(Image, AnUnfinishedBuilderCleansUp) {
  ImageBuilder builder(sample_info(), kMiB);
  builder.add("piece", random_bytes(kMiB, 12));
  ImageBuilder moved = std::move(builder);
  EXPECT_THROW(builder.add("other", {}), UsageError);
}
