// A bag-of-words classifier on data every Debian system has: the installed packages' names and
// descriptions in /var/lib/dpkg/status, predicting each package's Section. The words of the
// examples form a sparse CSR matrix (one row per package, one column per word); a softmax
// regression with a sparse first product is trained by gradient descent with momentum, and its
// accuracy measured on every fifth package, held out. Usage: sparse_text [status file] [steps]
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

using namespace kiln;

namespace {

struct Package {
  std::string name, section, text;
};

std::vector<Package> read_status(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IOError("sparse_text: cannot read " + path + " (a Debian system's package database)");
  std::vector<Package> packages;
  Package current;
  std::string line;
  auto finish = [&] {
    if (!current.name.empty() && !current.section.empty()) packages.push_back(current);
    current = Package();
  };
  bool in_description = false;
  while (std::getline(in, line)) {
    if (line.empty()) {
      finish();
      in_description = false;
      continue;
    }
    if (line[0] == ' ') {
      if (in_description) current.text += " " + line;
      continue;
    }
    in_description = false;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "Package") current.name = value;
    if (key == "Section") current.section = value.substr(value.rfind('/') + 1);  // "contrib/net" is net
    if (key == "Description") {
      current.text += " " + value;
      in_description = true;
    }
  }
  finish();
  return packages;
}

// Lower-case runs of letters and digits of the name and the description, each once.
std::set<std::string> words_of(const Package& p) {
  std::set<std::string> words;
  std::string word;
  for (char c : p.name + " " + p.text + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      if (word.size() > 1) words.insert(word);
      word.clear();
    }
  }
  return words;
}

}  // namespace

int run(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/var/lib/dpkg/status";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  const std::vector<Package> packages = read_status(path);

  // Sections with at least 15 packages are classes; the rest share one, "other".
  std::map<std::string, int> section_count;
  for (const Package& p : packages) ++section_count[p.section];
  std::vector<std::string> classes;
  for (const auto& [section, count] : section_count)
    if (count >= 15) classes.push_back(section);
  classes.push_back("other");
  auto class_of = [&](const std::string& section) {
    const auto it = std::find(classes.begin(), classes.end(), section);
    return static_cast<int64_t>(it == classes.end() ? classes.size() - 1 : it - classes.begin());
  };

  // The vocabulary: words of at least two training packages.
  std::vector<std::set<std::string>> words;
  std::unordered_map<std::string, int> document_frequency;
  for (size_t i = 0; i < packages.size(); ++i) {
    words.push_back(words_of(packages[i]));
    if (i % 5 != 0)
      for (const std::string& w : words.back()) ++document_frequency[w];
  }
  std::unordered_map<std::string, int64_t> column;
  for (const auto& [w, df] : document_frequency)
    if (df >= 2) column.emplace(w, 0);
  int64_t next_column = 0;
  for (auto& [w, c] : column) c = next_column++;

  // Two CSR matrices, training (4 of 5 packages) and held out, each row's words scaled to unit
  // length; the labels as class numbers.
  struct Split {
    std::vector<float> data;
    std::vector<int64_t> indices, indptr{0}, labels;
  } train, test;
  for (size_t i = 0; i < packages.size(); ++i) {
    Split& s = i % 5 == 0 ? test : train;
    std::vector<int64_t> row;
    for (const std::string& w : words[i])
      if (auto it = column.find(w); it != column.end()) row.push_back(it->second);
    std::sort(row.begin(), row.end());
    for (int64_t c : row) {
      s.indices.push_back(c);
      s.data.push_back(1.0f / std::sqrt(static_cast<float>(std::max<size_t>(row.size(), 1))));
    }
    s.indptr.push_back(static_cast<int64_t>(s.indices.size()));
    s.labels.push_back(class_of(packages[i].section));
  }
  const int64_t vocabulary = next_column, n_classes = static_cast<int64_t>(classes.size());
  auto as_sparse = [&](const Split& s) {
    return SparseTensor::csr(Tensor::from(s.data), Tensor::from(s.indices), Tensor::from(s.indptr),
                             {static_cast<int64_t>(s.labels.size()), vocabulary});
  };
  const SparseTensor x_train = as_sparse(train), x_test = as_sparse(test);
  std::printf("%zu packages from %s: %lld to train on, %lld held out; %lld words, %lld classes; "
              "%lld stored entries in the training matrix (%.2f%% of it)\n",
              packages.size(), path.c_str(), static_cast<long long>(train.labels.size()),
              static_cast<long long>(test.labels.size()), static_cast<long long>(vocabulary),
              static_cast<long long>(n_classes), static_cast<long long>(x_train.nnz()),
              100.0 * static_cast<double>(x_train.nnz()) / static_cast<double>(x_train.shape()[0] * vocabulary));

  // Softmax regression: the sparse product x . W is the first (and only) layer.
  Shared W = shared(Tensor::zeros({vocabulary, n_classes}, f32), "W"), b = shared(Tensor::zeros({n_classes}, f32), "b");
  Shared vW = shared(Tensor::zeros({vocabulary, n_classes}, f32), "vW"), vb = shared(Tensor::zeros({n_classes}, f32), "vb");
  SparseVar x = csr_matrix("x");
  Var y = vector("y", i64);
  Var probabilities = softmax(dot(x, W) + b);
  Var loss = mean(categorical_crossentropy(probabilities, y));
  const std::vector<Var> g = grad(loss, {W, b});
  const double learning_rate = 2.0, momentum = 0.9;
  Var new_vW = momentum * vW - learning_rate * g[0], new_vb = momentum * vb - learning_rate * g[1];
  Function train_step = function({x, y}, {Out(loss, {.borrow = true})},
                                 {.updates = {{vW, new_vW}, {vb, new_vb}, {W, W + new_vW}, {b, b + new_vb}}, .keep_buffers = true});
  Function predict = function({x}, {argmax(probabilities, 1)});

  auto accuracy = [&](const SparseTensor& features, const std::vector<int64_t>& labels) {
    const std::vector<int64_t> predicted = predict(features)[0].to_vector<int64_t>();
    int64_t right = 0;
    for (size_t i = 0; i < labels.size(); ++i) right += predicted[i] == labels[i];
    return 100.0 * static_cast<double>(right) / static_cast<double>(labels.size());
  };
  std::vector<int64_t> majority(test.labels.size(), 0);
  {
    std::vector<int64_t> counts(n_classes, 0);
    for (int64_t label : train.labels) ++counts[label];
    std::fill(majority.begin(), majority.end(), std::max_element(counts.begin(), counts.end()) - counts.begin());
  }
  int64_t majority_right = 0;
  for (size_t i = 0; i < test.labels.size(); ++i) majority_right += majority[i] == test.labels[i];
  std::printf("always the most common section: %.2f%% of the held-out packages\n",
              100.0 * static_cast<double>(majority_right) / static_cast<double>(test.labels.size()));

  std::vector<Tensor> arguments = sparse_parts(x_train), outputs;
  arguments.push_back(Tensor::from(train.labels));
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    train_step.call(arguments, outputs);
    if (step % 50 == 0 || step == steps)
      std::printf("step %4d  loss %.4f  train accuracy %.2f%%  held-out accuracy %.2f%%\n", step, outputs[0].item<float>(),
                  accuracy(x_train, train.labels), accuracy(x_test, test.labels));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d steps in %.3f s (%.0f examples/s)\n", steps, seconds,
              static_cast<double>(steps) * static_cast<double>(train.labels.size()) / seconds);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
