#pragma once
#include <string>

#include <kiln/kiln.hpp>

// Reads a gzip-compressed IDX file (images: u8 N x 28 x 28, labels: u8 N) as used by (Fashion-)MNIST.
// Images become f32 in [0, 1] shaped N x 784; labels become i64 shaped N.
kiln::Tensor read_idx_images(const std::string& path);
kiln::Tensor read_idx_labels(const std::string& path);
