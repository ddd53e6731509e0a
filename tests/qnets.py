"""Small ONNX test networks built with onnx.helper (seeded), shared by the compiler tests."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inits: dict, in_shape, out_name, out_shape, opset=13, in_name="x"):
    """Model with float32 input `in_name` of in_shape and one float32 output."""
    g = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(out_shape) if out_shape else None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv_w(rng, cout, cin, k):
    return (rng.normal(0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))).astype(np.float32)


def bn_params(rng, c, prefix):
    return {f"{prefix}_g": rng.uniform(0.5, 1.5, c).astype(np.float32),
            f"{prefix}_b": rng.normal(0, 0.2, c).astype(np.float32),
            f"{prefix}_m": rng.normal(0, 0.2, c).astype(np.float32),
            f"{prefix}_v": rng.uniform(0.5, 1.5, c).astype(np.float32)}


def bn_node(inp, out, prefix, name):
    return helper.make_node("BatchNormalization", [inp] + [f"{prefix}_{s}" for s in "gbmv"], [out],
                            name=name, epsilon=1e-5)


def conv_bn_relu(seed=0):
    """Conv 3x3 pad 1 (no bias) + BN + Relu: x [1,3,16,16] -> y [1,8,16,16]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), **bn_params(rng, 8, "bn")}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             bn_node("c", "b", "bn", "bn"), helper.make_node("Relu", ["b"], ["y"], name="relu")]
    return make_model(nodes, inits, (1, 3, 16, 16), "y", (1, 8, 16, 16))


def conv_stride2(seed=0):
    """Conv 5x5 stride 2, asymmetric pads (2,1,1,2), with bias, no relu: [1,4,15,13] -> y."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 6, 4, 5), "bias": rng.normal(0, 0.3, 6).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["y"], name="conv", kernel_shape=[5, 5],
                              strides=[2, 2], pads=[2, 1, 1, 2])]
    return make_model(nodes, inits, (1, 4, 15, 13), "y", None)


def conv_maxpool(seed=0):
    """Conv 1x1 + MaxPool 3x3 s2 p1 (ResNet stem pooling): [1,3,14,14] -> [1,8,7,7]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 1), "bias": rng.normal(0, 0.3, 8).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    return make_model(nodes, inits, (1, 3, 14, 14), "y", None)


def conv_avgpool(seed=0, global_pool=False):
    """Conv 3x3 + Relu + AveragePool 2x2 s2 (or GlobalAveragePool): [1,3,12,12] -> y."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), "bias": rng.normal(0, 0.3, 8).astype(np.float32)}
    pool = (helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool") if global_pool else
            helper.make_node("AveragePool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"), pool]
    return make_model(nodes, inits, (1, 3, 12, 12), "y", None)


def residual_add(seed=0, relu=True):
    """Two conv branches with ~6x different output ranges, Add (+ Relu): [1,4,8,8] -> [1,8,8,8]."""
    rng = np.random.default_rng(seed)
    inits = {"wa": conv_w(rng, 8, 4, 3), "wb": conv_w(rng, 8, 4, 1) * 6.0}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", kernel_shape=[1, 1]),
             helper.make_node("Add", ["a", "b"], ["s" if relu else "y"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu"))
    return make_model(nodes, inits, (1, 4, 8, 8), "y", None)


def gemm_head(seed=0, trans_b=1, softmax=False):
    """Conv + Relu + GlobalAveragePool + Flatten + Gemm (+ Softmax): [1,3,8,8] -> [1,10]."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, np.sqrt(2 / 16), (10, 16)).astype(np.float32)
    inits = {"w": conv_w(rng, 16, 3, 3), "fw": w if trans_b else w.T.copy(),
             "fb": rng.normal(0, 0.1, 10).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=trans_b)]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["prob"], name="sm", axis=1))
        out = "prob"
    return make_model(nodes, inits, (1, 3, 8, 8), out, (1, 10))


def flatten_gemm(seed=0, reshape=False):
    """Conv + Relu + MaxPool + Flatten (or Reshape) of (1, 8, 3, 3) into (1, 72) + Gemm, the VGG /
    AlexNet head: [1,3,7,7] -> [1,10]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), "fw": rng.normal(0, np.sqrt(2 / 72), (10, 72)).astype(np.float32),
             "fb": rng.normal(0, 0.1, 10).astype(np.float32), "shape": np.array([1, -1], np.int64)}
    flat = (helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat") if reshape else
            helper.make_node("Flatten", ["p"], ["f"], name="flat", axis=1))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
             flat, helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=1)]
    return make_model(nodes, inits, (1, 3, 7, 7), "logits", (1, 10))


def caffe2_bn(seed=0, opset=9):
    """Conv + BatchNormalization + Mul(Unsqueeze(scale)) + Add(Unsqueeze(shift)) + Relu, the
    inception_v2 / densenet121 pattern, then Sub of a scalar and Div by a per-channel (1, C, 1, 1)
    constant: x [1,3,8,8] -> y [1,8,8,8]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), **bn_params(rng, 8, "bn"),
             "sc": rng.uniform(0.5, 1.5, 8).astype(np.float32), "sh": rng.normal(0, 0.2, 8).astype(np.float32),
             "k": np.array(0.25, np.float32), "d": rng.uniform(0.5, 2.0, (1, 8, 1, 1)).astype(np.float32)}
    ax = {"axes": [1, 2]} if opset < 13 else {}
    if opset >= 13:
        inits["ax"] = np.array([1, 2], np.int64)
    uin = (lambda n: [n, "ax"]) if opset >= 13 else (lambda n: [n])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             bn_node("c", "b", "bn", "bn"),
             helper.make_node("Unsqueeze", uin("sc"), ["sc3"], name="usc", **ax),
             helper.make_node("Unsqueeze", uin("sh"), ["sh3"], name="ush", **ax),
             helper.make_node("Mul", ["b", "sc3"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "sh3"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
             helper.make_node("Sub", ["c2", "k"], ["s"], name="sub"),
             helper.make_node("Div", ["s", "d"], ["y"], name="div")]
    inits["w2"] = conv_w(rng, 8, 8, 1)
    return make_model(nodes, inits, (1, 3, 8, 8), "y", None, opset=opset)


def preact_bn(seed=0):
    """DenseNet pre-activation: Conv + MaxPool, then a standalone BatchNormalization + Mul + Relu
    (a diagonal 1x1 Conv on the device) + Conv 1x1: x [1,3,8,8] -> y [1,6,4,4]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), **bn_params(rng, 8, "bn"), "w2": conv_w(rng, 6, 8, 1),
             "sc": rng.uniform(0.5, 1.5, (8, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             bn_node("p", "b", "bn", "bn"),
             helper.make_node("Mul", ["b", "sc"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", kernel_shape=[1, 1])]
    return make_model(nodes, inits, (1, 3, 8, 8), "y", None)


def avgpool_pads(seed=0, count_include_pad=0, k=3, s=1, pads=(1, 1, 1, 1), hw=(7, 9)):
    """Conv 1x1 + AveragePool k x k stride s with pads (inception's pool branch):
    x [1,3,H,W] -> y."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 1), "bias": rng.normal(0, 0.3, 8).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("AveragePool", ["c"], ["y"], name="pool", kernel_shape=[k, k], strides=[s, s],
                              pads=list(pads), count_include_pad=count_include_pad)]
    return make_model(nodes, inits, (1, 3, *hw), "y", None)


def ceil_pool(op="MaxPool", seed=0, count_include_pad=0, k=3, s=2, pads=(0, 0, 0, 0), hw=(8, 9)):
    """Conv 1x1 + ``op`` (MaxPool or AveragePool) k x k stride s, ``pads``, ceil_mode=1 (torch's
    ceil_mode=True pools: GoogLeNet, SqueezeNet 1.0): x [1,3,H,W] -> y."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 1), "bias": rng.normal(0, 0.3, 8).astype(np.float32)}
    extra = {"count_include_pad": count_include_pad} if op == "AveragePool" else {}
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node(op, ["c"], ["y"], name="pool", kernel_shape=[k, k], strides=[s, s],
                              pads=list(pads), ceil_mode=1, **extra)]
    return make_model(nodes, inits, (1, 3, *hw), "y", None)


def same_pad_dropout(seed=0, conv_pad="SAME_UPPER", pool_pad="SAME_LOWER"):
    """Conv 3x3 s2 auto_pad=conv_pad (odd total padding) + Dropout (mask output unused, opset 9)
    + MaxPool 2x2 s1 auto_pad=pool_pad + Identity: x [1,3,9,10] -> y [1,8,5,5]."""
    rng = np.random.default_rng(seed)
    inits = {"w": conv_w(rng, 8, 3, 3), "bias": rng.normal(0, 0.3, 8).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", strides=[2, 2], auto_pad=conv_pad),
             helper.make_node("Dropout", ["c"], ["d", "mask"], name="drop", ratio=0.5),
             helper.make_node("MaxPool", ["d"], ["p"], name="pool", kernel_shape=[2, 2], auto_pad=pool_pad),
             helper.make_node("Identity", ["p"], ["y"], name="id")]
    return make_model(nodes, inits, (1, 3, 9, 10), "y", None, opset=9)


def fire(seed=2, e1=8, e3=8, pool=False, head=True):
    """SqueezeNet fire module: 1x1 squeeze (4) + Relu -> 1x1 expand (e1, outputs ~3x smaller) +
    Relu and 3x3 pad 1 expand (e3) + Relu -> Concat (channels) [-> MaxPool 3x3 s2] [-> 1x1 conv
    (6)]: x [1,8,9,9] -> y (without head: the Concat or the pool is the graph output)."""
    rng = np.random.default_rng(seed)
    inits = {"ws": conv_w(rng, 4, 8, 1), "bs": rng.normal(0, 0.2, 4).astype(np.float32),
             "w1": conv_w(rng, e1, 4, 1) * 0.3, "b1": rng.normal(0, 0.2, e1).astype(np.float32),
             "w3": conv_w(rng, e3, 4, 3), "b3": rng.normal(0, 0.2, e3).astype(np.float32),
             "wh": conv_w(rng, 6, e1 + e3, 1)}
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s"], name="squeeze", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["s"], ["sr"], name="squeeze_relu"),
             helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"], name="expand1", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["e1"], ["e1r"], name="expand1_relu"),
             helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], name="expand3", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["e3"], ["e3r"], name="expand3_relu"),
             helper.make_node("Concat", ["e1r", "e3r"], ["cat"], name="concat", axis=1)]
    last = "cat"
    if pool:
        nodes.append(helper.make_node("MaxPool", ["cat"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2]))
        last = "p"
    if head:
        nodes.append(helper.make_node("Conv", [last, "wh"], ["y"], name="head", kernel_shape=[1, 1]))
        last = "y"
    else:
        del inits["wh"]
    return make_model(nodes, inits, (1, 8, 9, 9), last, None)


def concat_mixed(seed=0):
    """Concat of the graph input x (3 channels), a 3x3 conv of x (5) and a nested Concat of two
    1x1 convs (8, ~2x larger, and 2), then a 3x3 pad 1 conv (6): x [1,3,6,6] -> y [1,6,6,6]."""
    rng = np.random.default_rng(seed)
    inits = {"wa": conv_w(rng, 5, 3, 3), "wb": conv_w(rng, 8, 3, 1) * 2.0, "wc": conv_w(rng, 2, 3, 1),
             "wh": conv_w(rng, 6, 18, 3)}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "wc"], ["c"], name="conv_c", kernel_shape=[1, 1]),
             helper.make_node("Concat", ["b", "c"], ["bc"], name="inner", axis=-3),
             helper.make_node("Concat", ["x", "a", "bc"], ["cat"], name="outer", axis=1),
             helper.make_node("Conv", ["cat", "wh"], ["y"], name="head", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    return make_model(nodes, inits, (1, 3, 6, 6), "y", None)


def concat_fc(seed=0):
    """Two conv + Relu branches (5 and 6 channels) + GlobalAveragePool + Flatten, a Concat of the (1, C)
    vectors on axis 1, a single-input Concat (axis -1), Gemm: x [1,3,6,6] -> [1,4]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": conv_w(rng, 5, 3, 3), "w2": conv_w(rng, 6, 3, 1),
             "fw": rng.normal(0, 0.3, (4, 11)).astype(np.float32), "fb": rng.normal(0, 0.1, 4).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="r1"),
             helper.make_node("GlobalAveragePool", ["ar"], ["ap"], name="g1"),
             helper.make_node("Flatten", ["ap"], ["af"], name="f1"),
             helper.make_node("Conv", ["x", "w2"], ["b"], name="c2", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["b"], ["br"], name="r2"),
             helper.make_node("GlobalAveragePool", ["br"], ["bp"], name="g2"),
             helper.make_node("Flatten", ["bp"], ["bf"], name="f2"),
             helper.make_node("Concat", ["af", "bf"], ["cat"], name="cat", axis=1),
             helper.make_node("Concat", ["cat"], ["cat1"], name="single", axis=-1),
             helper.make_node("Gemm", ["cat1", "fw", "fb"], ["y"], name="fc", transB=1)]
    return make_model(nodes, inits, (1, 3, 6, 6), "y", (1, 4))


def concat_refused(kind, seed=0):
    """Concat graphs the compiler refuses by name (but "add_maps", now a lane copy): x [1,4,6,6] -> convs a (5 channels, 1x1), b
    (6, 3x3 pad 1), d (6, 1x1), e (5, 1x1), then per ``kind``: "axis" (Concat of b and d on H),
    "twice" (Concat(b, b)), "two_concats" (a in Concat(a, b) and Concat(a, d)), "pad_values" (a
    MaxPool pad 1 on Concat(a, b) and a 3x3 pad 1 conv on a), "add_maps" (Add of Concat(a, b)
    and Concat(d, e): different channel maps on small)."""
    rng = np.random.default_rng(seed)
    inits = {f"w{n}": conv_w(rng, c, 4, k) for n, c, k in (("a", 5, 1), ("b", 6, 3), ("d", 6, 1), ("e", 5, 1))}
    nodes = [helper.make_node("Conv", ["x", f"w{n}"], [n], name=f"conv_{n}", kernel_shape=[k, k],
                              pads=[k // 2] * 4) for n, k in (("a", 1), ("b", 3), ("d", 1), ("e", 1))]

    def cat(name, ins, out, axis=1):
        return helper.make_node("Concat", ins, [out], name=name, axis=axis)

    def conv(name, inp, out, cin, cout=4, k=1):
        inits[f"w_{name}"] = conv_w(rng, cout, cin, k)
        return helper.make_node("Conv", [inp, f"w_{name}"], [out], name=name, kernel_shape=[k, k], pads=[k // 2] * 4)
    if kind == "axis":
        nodes += [cat("cat", ["b", "d"], "y", axis=2)]
    elif kind == "twice":
        nodes += [cat("cat", ["b", "b"], "y")]
    elif kind == "two_concats":
        nodes += [cat("cat1", ["a", "b"], "c1"), cat("cat2", ["a", "d"], "c2"), conv("h1", "c1", "h1", 11),
                  conv("h2", "c2", "h2", 11), helper.make_node("Add", ["h1", "h2"], ["y"], name="add")]
    elif kind == "pad_values":
        nodes += [cat("cat", ["a", "b"], "c"),
                  helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  conv("h1", "p", "h1", 11), conv("h2", "a", "h2", 5, k=3),
                  helper.make_node("Add", ["h1", "h2"], ["y"], name="add")]
    elif kind == "add_maps":
        nodes += [cat("cat1", ["a", "b"], "c1"), cat("cat2", ["d", "e"], "c2"),
                  helper.make_node("Add", ["c1", "c2"], ["y"], name="add")]
    return make_model(nodes, inits, (1, 4, 6, 6), "y", None)


def grouped_dilated(seed=0):
    """Grouped Conv (group 2) + Clip(0, 6) as inputs, dilated Conv (2, 1) padded (2, 1, 2, 1) + BN +
    Clip(-1, 1), depthwise 3x3 stride 2 + Relu, ReduceMean over (2, 3) keepdims=0 + Gemm:
    x [1,4,9,11] -> y [1,5] (opset 13)."""
    rng = np.random.default_rng(seed)
    inits = {"w1": conv_w(rng, 6, 2, 3), "b1": rng.normal(0, 0.1, 6).astype(np.float32),
             "w2": conv_w(rng, 6, 6, 3), **bn_params(rng, 6, "bn"),
             "w3": conv_w(rng, 6, 1, 3), "lo": np.float32(0), "hi": np.float32(6),
             "m1": np.float32(-1), "p1": np.float32(1), "axes": np.array([2, 3], np.int64),
             "fc": rng.normal(0, 0.3, (5, 6)).astype(np.float32), "fb": rng.normal(0, 0.1, 5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["g"], name="grouped", group=2, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["g", "lo", "hi"], ["g6"], name="relu6"),
             helper.make_node("Conv", ["g6", "w2"], ["d"], name="dilated", dilations=[2, 1], pads=[2, 1, 2, 1]),
             bn_node("d", "db", "bn", "bn"),
             helper.make_node("Clip", ["db", "m1", "p1"], ["dc"], name="hardtanh"),
             helper.make_node("Conv", ["dc", "w3"], ["e"], name="depthwise", group=6, strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["e"], ["er"], name="relu"),
             helper.make_node("ReduceMean", ["er"], ["r"], name="mean", axes=[2, 3], keepdims=0),
             helper.make_node("Gemm", ["r", "fc", "fb"], ["y"], name="fc", transB=1)]
    del inits["axes"]
    return make_model(nodes, inits, (1, 4, 9, 11), "y", (1, 5))


def clip_attrs_opset9(seed=0):
    """Conv + Clip(min=0, max=4) as attributes (opset < 11): x [1,3,8,8] -> y [1,4,8,8]."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c"], ["y"], name="clip", min=0.0, max=4.0)]
    return make_model(nodes, {"w": conv_w(rng, 4, 3, 3)}, (1, 3, 8, 8), "y", (1, 4, 8, 8), opset=9)


def shuffle_unit(seed=0):
    """A ShuffleNet v1 stride-2 unit and a residual after it: grouped 1x1 Conv + BN + Relu,
    channel shuffle (Reshape (1, 2, 6, 8, 8), Transpose [0, 2, 1, 3, 4], Reshape back), depthwise
    3x3 stride 2 + BN, grouped 1x1 Conv + BN; shortcut AveragePool 3x3 s2 p1 (count_include_pad 1); Concat (4 + 8
    channels: gap lanes on blocks of 8) + Relu; then a 1x1 Conv whose output is added to the
    Concat result (it must write the Concat's lane layout) + Relu. x [1,8,8,8] -> y [1,12,4,4]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": conv_w(rng, 12, 4, 1), **bn_params(rng, 12, "b1"),
             "s5": np.array([1, 2, 6, 8, 8], np.int64), "s4": np.array([1, 12, 8, 8], np.int64),
             "w2": conv_w(rng, 12, 1, 3), **bn_params(rng, 12, "b2"),
             "w3": conv_w(rng, 4, 6, 1), **bn_params(rng, 4, "b3"),
             "w4": conv_w(rng, 12, 12, 1), "c4": rng.normal(0, 0.1, 12).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["g1"], name="gconv1", group=2),
             bn_node("g1", "g1b", "b1", "bn1"), helper.make_node("Relu", ["g1b"], ["g1r"], name="relu1"),
             helper.make_node("Reshape", ["g1r", "s5"], ["sh5"], name="shuf_in"),
             helper.make_node("Transpose", ["sh5"], ["sht"], name="shuf", perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["sht", "s4"], ["sh"], name="shuf_out"),
             helper.make_node("Conv", ["sh", "w2"], ["dw"], name="dwconv", group=12, strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             bn_node("dw", "dwb", "b2", "bn2"),
             helper.make_node("Conv", ["dwb", "w3"], ["g3"], name="gconv2", group=2),
             bn_node("g3", "g3b", "b3", "bn3"),
             helper.make_node("AveragePool", ["x"], ["ap"], name="shortcut", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
             helper.make_node("Concat", ["g3b", "ap"], ["cat"], name="cat", axis=1),
             helper.make_node("Relu", ["cat"], ["catr"], name="relu_cat"),
             helper.make_node("Conv", ["catr", "w4", "c4"], ["c4o"], name="conv4"),
             helper.make_node("Add", ["c4o", "catr"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu_out")]
    return make_model(nodes, inits, (1, 8, 8, 8), "y", (1, 12, 4, 4))


def mlp(seed=0, k=784):
    """An MLP on a (1, k) vector input: Gemm (k -> 32) + Relu, Gemm (32 -> 10): x [1,k] -> y [1,10]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, np.sqrt(2 / k), (32, k)).astype(np.float32), "b1": rng.normal(0, 0.1, 32).astype(np.float32),
             "w2": rng.normal(0, 0.3, (10, 32)).astype(np.float32), "b2": rng.normal(0, 0.1, 10).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"], name="fc2", transB=1)]
    return make_model(nodes, inits, (1, k), "y", (1, 10))


def inputs(shape, n, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, shape).astype(np.float32) for _ in range(n)]


def in_shape(model: onnx.ModelProto) -> tuple:
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)


def unary_lut(seed=0, opset=18):
    """Element-wise functions on the vector unit's LUT, after Convs and after each other:
    Conv + SiLU (Mul(x, Sigmoid(x))), Conv + HardSwish + Tanh + LeakyRelu(0.1), Conv +
    Mul(HardSigmoid(0.25, 0.4)(x), x) + Elu + Softplus + Mish + Sigmoid:
    x [1,3,9,10] -> y [1,6,9,10] (opset 18)."""
    rng = np.random.default_rng(seed)
    inits = {"w1": conv_w(rng, 6, 3, 3), "w2": conv_w(rng, 6, 6, 1), "w3": conv_w(rng, 6, 6, 3)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             n("Sigmoid", ["c1"], ["s1"], name="sig1"),
             n("Mul", ["c1", "s1"], ["silu"], name="silu"),
             n("Conv", ["silu", "w2"], ["c2"], name="conv2"),
             n("HardSwish", ["c2"], ["hs"], name="hswish"),
             n("Tanh", ["hs"], ["th"], name="tanh"),
             n("LeakyRelu", ["th"], ["lr"], name="leaky", alpha=0.1),
             n("Conv", ["lr", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
             n("HardSigmoid", ["c3"], ["hsg"], name="hsig", alpha=0.25, beta=0.4),
             n("Mul", ["hsg", "c3"], ["hsw2"], name="x_hsig"),
             n("Elu", ["hsw2"], ["elu"], name="elu"),
             n("Softplus", ["elu"], ["sp"], name="softplus"),
             n("Mish", ["sp"], ["mish"], name="mish"),
             n("Sigmoid", ["mish"], ["y"], name="sig_out")]
    return make_model(nodes, inits, (1, 3, 9, 10), "y", (1, 6, 9, 10), opset=opset)


def se_block(seed=0, gate_first=False):
    """Squeeze-and-excite (MobileNetV3 / EfficientNet): Conv 3x3 + Relu -> x; GlobalAveragePool ->
    1x1 Conv + Relu -> 1x1 Conv -> HardSigmoid -> Mul(x, gate) (a (1, C, 1, 1) channel gate; the
    gate first with ``gate_first``), then Mul of two convs' outputs + Relu:
    x [1,3,8,7] -> y [1,12,8,7]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w1": conv_w(rng, 12, 3, 3), "wr": conv_w(rng, 4, 12, 1), "br": rng.normal(0, 0.1, 4).astype(np.float32),
             "we": conv_w(rng, 12, 4, 1), "be": rng.normal(0, 0.5, 12).astype(np.float32),
             "w2": conv_w(rng, 12, 12, 1), "w3": conv_w(rng, 12, 12, 3)}
    nodes = [n("Conv", ["x", "w1"], ["c"], name="conv", pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"], name="relu"),
             n("GlobalAveragePool", ["r"], ["p"], name="squeeze"),
             n("Conv", ["p", "wr", "br"], ["q"], name="reduce"), n("Relu", ["q"], ["qr"], name="relu_r"),
             n("Conv", ["qr", "we", "be"], ["e"], name="expand"),
             n("HardSigmoid", ["e"], ["g"], name="gate", alpha=1 / 6, beta=0.5),
             n("Mul", ["g", "r"] if gate_first else ["r", "g"], ["s"], name="excite"),
             n("Conv", ["s", "w2"], ["a"], name="conv_a"),
             n("Conv", ["s", "w3"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             n("Mul", ["a", "b"], ["m"], name="product"), n("Relu", ["m"], ["y"], name="relu_out")]
    return make_model(nodes, inits, (1, 3, 8, 7), "y", (1, 12, 8, 7))


def lrn_net(seed=0, size=5):
    """AlexNet's conv + Relu + LRN(size, alpha 1e-4 scaled up to 1e-2 so the normalization shows,
    beta 0.75, bias 2) + MaxPool + Conv + LRN (defaults): x [1,3,12,12] -> y [1,10,6,6]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"], name="relu1"),
             n("LRN", ["r1"], ["l1"], name="norm1", size=size, alpha=1e-2, beta=0.75, bias=2.0),
             n("MaxPool", ["l1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             n("LRN", ["c2"], ["y"], name="norm2", size=3)]
    inits = {"w1": conv_w(rng, 12, 3, 3) * 3, "w2": conv_w(rng, 10, 12, 3)}
    return make_model(nodes, inits, (1, 3, 12, 12), "y", (1, 10, 6, 6))


def prelu_net(slope=(0.1, -0.4, 0.6, 0.0, 1.5, 0.25), seed=7):
    """Conv 3x3 pad 1 (3 -> 6) + PRelu(``slope``, a (6, 1, 1) per-channel one by default, or any
    shape given) + 1x1 Conv (6 -> 4): x [1,3,6,6] -> y [1,4,6,6]. On 'small' (8 lanes) the
    per-channel form's two halves are part-filled blocks of one Concat (gap lanes)."""
    rng = np.random.default_rng(seed)
    slope = np.asarray(slope, np.float32)
    slope = slope.reshape(6, 1, 1) if slope.shape == (6,) else slope
    n = helper.make_node
    inits = {"w": conv_w(rng, 6, 3, 3), "s": slope, "w2": conv_w(rng, 4, 6, 1)}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), n("PRelu", ["c", "s"], ["p"], name="prelu"),
             n("Conv", ["p", "w2"], ["y"], name="conv2")]
    return make_model(nodes, inits, (1, 3, 6, 6), "y", None)


def pad_net(seed=0):
    """Conv 1x1 (3 -> 6), Pad of value 0.75 (top 2, left 1: off the DDR granule on 'small',
    right 2), Conv 3x3 (6 -> 5), Pad of the lowest float32 (1 on each side), MaxPool 3x3 s2:
    x [1,3,7,9] -> y [1,5,4,5]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w1": conv_w(rng, 6, 3, 1), "w2": conv_w(rng, 5, 6, 3), "p1": np.array([0, 0, 2, 1, 0, 0, 0, 2], np.int64),
             "v1": np.float32(0.75), "p2": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "v2": np.float32(np.finfo(np.float32).min)}
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1"), n("Pad", ["c1", "p1", "v1"], ["p1o"], name="pad1"),
             n("Conv", ["p1o", "w2"], ["c2"], name="conv2"), n("Pad", ["c2", "p2", "v2"], ["p2o"], name="pad2"),
             n("MaxPool", ["p2o"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2])]
    return make_model(nodes, inits, (1, 3, 7, 9), "y", None)


def spatial_slices(seed=5):
    """Slices of H and W, copies on the device: Conv 1x1 (3 -> 4), Split on W into two halves
    added together, Split on H into 1 + 3 rows, the 3 through a Conv 3x3 pad 1 (4 -> 5), a Slice
    [1::2, 1::3] of H and W (strided, off the DDR granule on 'small'): x [1,3,4,10] -> y [1,5,1,2]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"),
             n("Split", ["c"], ["l", "r"], name="cols", axis=3),
             n("Add", ["l", "r"], ["s"], name="add"),
             n("Split", ["s", "sp"], ["top", "rest"], name="rows", axis=2),
             n("Conv", ["rest", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             n("Slice", ["c2", "st", "en", "ax", "stp"], ["y"], name="stride")]
    inits = {"w": conv_w(rng, 4, 3, 1), "w2": conv_w(rng, 5, 4, 3), "sp": np.array([1, 3], np.int64),
             "st": np.array([1, 1], np.int64), "en": np.array([3, 5], np.int64), "ax": np.array([2, 3], np.int64),
             "stp": np.array([2, 3], np.int64)}
    return make_model(nodes, inits, (1, 3, 4, 10), "y", None)


def glu(seed=0, c=5, split=True):
    """A gated linear unit and an Add of the two halves: Conv 3x3 pad 1 (3 -> 2c), its halves a,
    b (a Split, or two Slices), ``a * Sigmoid(b)`` (ONNX's written-out GLU, torch's F.glu), then
    plus ``b`` (an Add of halves on different lanes) and a 1x1 Conv (c -> 4): x [1,3,6,5] ->
    y [1,4,6,5]. On 'small' (8 lanes) c = 5 puts b on lanes 5..9, a on 0..4."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w": conv_w(rng, 2 * c, 3, 3), "w2": conv_w(rng, 4, c, 1), "s0": np.array([0], np.int64),
             "s1": np.array([c], np.int64), "e1": np.array([2 * c], np.int64), "ax": np.array([1], np.int64)}
    halves = ([n("Split", ["h"], ["a", "b"], name="halves", axis=1)] if split else
              [n("Slice", ["h", "s0", "s1", "ax"], ["a"], name="first"),
               n("Slice", ["h", "s1", "e1", "ax"], ["b"], name="second")])
    nodes = [n("Conv", ["x", "w"], ["h"], name="conv", pads=[1, 1, 1, 1])] + halves + [
        n("Sigmoid", ["b"], ["g"], name="gate"), n("Mul", ["a", "g"], ["m"], name="glu"),
        n("Add", ["m", "b"], ["s"], name="plus"), n("Conv", ["s", "w2"], ["y"], name="head")]
    return make_model(nodes, inits, (1, 3, 6, 5), "y", None)


def relayout_net(seed=0, c=6):
    """Copies into a new layout: Conv 1x1 (3 -> c) on x [1,3,4,6], Reshape -> (1, c, 3, 8) (rows of
    8 pixels), Conv 3x3 pad 1 (c -> 5), Transpose [0, 1, 3, 2] -> (1, 5, 8, 3), Relu, Reshape ->
    (1, 5, 1, 24) (a token sequence), Conv 1x3 (5 -> 4): y [1,4,1,22]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w1": conv_w(rng, c, 3, 1), "w2": conv_w(rng, 5, c, 3), "w3": rng.normal(0, 0.3, (4, 5, 1, 3)).astype(np.float32),
             "s1": np.array([1, c, 3, 8], np.int64), "s2": np.array([1, 5, 1, 24], np.int64)}
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1"), n("Reshape", ["c1", "s1"], ["r1"], name="rows8"),
             n("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             n("Transpose", ["c2"], ["t"], name="swap_hw", perm=[0, 1, 3, 2]), n("Relu", ["t"], ["tr"], name="relu"),
             n("Reshape", ["tr", "s2"], ["seq"], name="tokens"), n("Conv", ["seq", "w3"], ["y"], name="conv3")]
    return make_model(nodes, inits, (1, 3, 4, 6), "y", None)


def bilinear_neck(seed=0):
    """An FPN neck with torch's bilinear upsampling: Conv 3x3 s2 (3 -> 6) to the deep map, Resize
    linear x2 (half_pixel), Concat with a shallow Conv 1x1 (3 -> 5) map, Pad mode edge (1, 2 on W;
    1 on H), Conv 3x3 (11 -> 4), Pad mode reflect (top 1, left 2, bottom 1, right 1), Conv 3x3
    (4 -> 3): x [1,3,8,10] -> y [1,3,8,12]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w1": conv_w(rng, 6, 3, 3), "w2": conv_w(rng, 5, 3, 1), "w3": conv_w(rng, 4, 11, 3),
             "scales": np.array([1, 1, 2, 2], np.float32), "pads": np.array([0, 0, 1, 1, 0, 0, 1, 2], np.int64),
             "rpads": np.array([0, 0, 1, 2, 0, 0, 1, 1], np.int64), "w4": conv_w(rng, 3, 4, 3)}
    nodes = [n("Conv", ["x", "w1"], ["deep"], name="down", pads=[1, 1, 1, 1], strides=[2, 2]),
             n("Resize", ["deep", "", "scales"], ["up"], name="up", mode="linear"),
             n("Conv", ["x", "w2"], ["shallow"], name="lateral"),
             n("Concat", ["up", "shallow"], ["cat"], name="cat", axis=1),
             n("Pad", ["cat", "pads"], ["padded"], name="edge", mode="edge"),
             n("Conv", ["padded", "w3"], ["h"], name="head"),
             n("Pad", ["h", "rpads"], ["hr"], name="mirror", mode="reflect"),
             n("Conv", ["hr", "w4"], ["y"], name="out")]
    return make_model(nodes, inits, (1, 3, 8, 10), "y", None)


def yolo_neck(seed=0, coord="asymmetric", nearest="floor", opset=13):
    """A YOLO / FPN neck: Conv s2 + SiLU (Mul(x, Sigmoid(x))) -> deep; Resize nearest x2 of the
    deep map (scales constant input; ``coord`` / ``nearest`` modes), Concat with the shallow
    Conv + SiLU map, Conv + SiLU: x [1,3,12,10] -> y [1,8,12,10]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"w1": conv_w(rng, 6, 3, 3), "w2": conv_w(rng, 8, 6, 3), "w3": conv_w(rng, 8, 14, 3),
             "scales": np.array([1, 1, 2, 2], np.float32), "roi": np.zeros(0, np.float32)}
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             n("Sigmoid", ["c1"], ["g1"], name="sig1"), n("Mul", ["c1", "g1"], ["s1"], name="silu1"),
             n("Conv", ["s1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
             n("Sigmoid", ["c2"], ["g2"], name="sig2"), n("Mul", ["c2", "g2"], ["s2"], name="silu2"),
             n("Resize", ["s2", "roi", "scales"], ["up"], name="up", mode="nearest",
               coordinate_transformation_mode=coord, nearest_mode=nearest),
             n("Concat", ["up", "s1"], ["cat"], name="cat", axis=1),
             n("Conv", ["cat", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
             n("Sigmoid", ["c3"], ["g3"], name="sig3"), n("Mul", ["c3", "g3"], ["y"], name="silu3")]
    return make_model(nodes, inits, (1, 3, 12, 10), "y", (1, 8, 12, 10), opset=opset)


def wide_fc(seed=0, n_out=2008, k=64):
    """A (1, k) vector through a Gemm with ``n_out`` outputs: on 'small' (8 columns) 251 cout
    blocks, more than one accumulator group may hold under the token limit: x [1,64] -> y [1,2008]."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)]
    inits = {"w": rng.normal(0, 0.1, (n_out, k)).astype(np.float32), "b": rng.normal(0, 0.1, n_out).astype(np.float32)}
    return make_model(nodes, inits, (1, k), "y", (1, n_out))


def mobilenet_block(seed=0, c=12, hw=10):
    """A MobileNetV2 inverted residual and a strided depthwise layer: 1x1 Conv c -> 2c + BN +
    ReLU6, depthwise 3x3 pad 1 + BN + ReLU6, 1x1 Conv 2c -> c + BN, Add of the input; then a
    depthwise 5x5 stride 2 pad 2 with bias + Relu: x [1, c, hw, hw] -> y [1, c, hw/2, hw/2]
    (opset 13). On 'small' (8 lanes) 2c = 24 and c = 12 channels are 3 and 2 blocks, the last one
    part-filled."""
    rng = np.random.default_rng(seed)
    e = 2 * c
    inits = {"w1": conv_w(rng, e, c, 1), **bn_params(rng, e, "bn1"), "w2": conv_w(rng, e, 1, 3),
             **bn_params(rng, e, "bn2"), "w3": conv_w(rng, c, e, 1), **bn_params(rng, c, "bn3"),
             "w4": conv_w(rng, c, 1, 5), "b4": rng.normal(0, 0.1, c).astype(np.float32),
             "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
             bn_node("a", "ab", "bn1", "bn1"),
             helper.make_node("Clip", ["ab", "lo", "hi"], ["a6"], name="relu6_1"),
             helper.make_node("Conv", ["a6", "w2"], ["d"], name="dw3x3", group=e, pads=[1, 1, 1, 1]),
             bn_node("d", "db", "bn2", "bn2"),
             helper.make_node("Clip", ["db", "lo", "hi"], ["d6"], name="relu6_2"),
             helper.make_node("Conv", ["d6", "w3"], ["p"], name="project"),
             bn_node("p", "pb", "bn3", "bn3"),
             helper.make_node("Add", ["pb", "x"], ["r"], name="residual"),
             helper.make_node("Conv", ["r", "w4", "b4"], ["s"], name="dw5x5s2", group=c, strides=[2, 2],
                              pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return make_model(nodes, inits, (1, c, hw, hw), "y", (1, c, hw // 2, hw // 2))


def conv1d_net(seed=0, c=4, length=48):
    """A 1-D CNN on a (1, C, L) sequence: Conv1d k5 pad 2 + BatchNorm + Relu, MaxPool1d k2 s2,
    Conv1d k3 stride 2 pad 1 with bias + Clip(0, 6), Mul by a (C, 1) per-channel constant, a
    residual Add of a 1x1 Conv1d, GlobalAveragePool, Flatten, Gemm: x [1, c, L] -> y [1, 6]."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, np.sqrt(2.0 / (c * 5)), (8, c, 5)).astype(np.float32)
    w2 = rng.normal(0, np.sqrt(2.0 / (8 * 3)), (12, 8, 3)).astype(np.float32)
    w3 = rng.normal(0, np.sqrt(2.0 / 12), (12, 12, 1)).astype(np.float32)
    inits = {"w1": w1, **bn_params(rng, 8, "bn"), "w2": w2, "b2": rng.normal(0, 0.1, 12).astype(np.float32),
             "lo": np.float32(0), "hi": np.float32(6), "s": rng.uniform(0.5, 1.5, (12, 1)).astype(np.float32),
             "w3": w3, "fc": rng.normal(0, 0.3, (6, 12)).astype(np.float32),
             "fb": rng.normal(0, 0.1, 6).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["a"], name="conv1", pads=[2, 2], kernel_shape=[5]),
             bn_node("a", "ab", "bn", "bn"),
             n("Relu", ["ab"], ["ar"], name="relu1"),
             n("MaxPool", ["ar"], ["p"], name="pool", kernel_shape=[2], strides=[2]),
             n("Conv", ["p", "w2", "b2"], ["c2"], name="conv2", strides=[2], pads=[1, 1]),
             n("Clip", ["c2", "lo", "hi"], ["c6"], name="relu6"),
             n("Mul", ["c6", "s"], ["cs"], name="scale"),
             n("Conv", ["cs", "w3"], ["c3"], name="conv1x1"),
             n("Add", ["c3", "cs"], ["r"], name="residual"),
             n("GlobalAveragePool", ["r"], ["g"], name="gap"),
             n("Flatten", ["g"], ["f"], name="flatten"),
             n("Gemm", ["f", "fc", "fb"], ["y"], name="fc", transB=1)]
    return make_model(nodes, inits, (1, c, length), "y", (1, 6))


def csp_split(seed=0, opset=13, sizes=(5, 7)):
    """YOLOv8's C2f pattern: a 1x1 conv (12 channels) + Relu, Split on the channels into ``sizes``
    (not block aligned), the second part through a 1x1 conv (6), a channel Slice [3, 11) of the
    conv output through a 3x3 MaxPool, a Concat of both parts, the conv and the pool (a part that
    is a view is copied), a 1x1 conv: x [1,3,8,8] -> y [1,8,8,8]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": conv_w(rng, 12, 3, 1), "w2": conv_w(rng, 6, sizes[1], 1),
             "w3": conv_w(rng, 8, sum(sizes) + 6 + 8, 1),
             "sl_s": np.array([3], np.int64), "sl_e": np.array([11], np.int64), "sl_a": np.array([1], np.int64)}
    if opset >= 13:
        inits["split"] = np.array(sizes, np.int64)
        split = helper.make_node("Split", ["a", "split"], ["s0", "s1"], name="split", axis=1)
    else:
        split = helper.make_node("Split", ["a"], ["s0", "s1"], name="split", axis=1, split=list(sizes))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], name="cv1", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a0"], ["a"], name="relu1"),
             split,
             helper.make_node("Conv", ["s1", "w2"], ["b"], name="cv2", kernel_shape=[1, 1]),
             helper.make_node("Slice", ["a", "sl_s", "sl_e", "sl_a"], ["c"], name="mid"),
             helper.make_node("MaxPool", ["c"], ["d"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["s0", "s1", "b", "d"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], name="cv3", kernel_shape=[1, 1])]
    return make_model(nodes, inits, (1, 3, 8, 8), "y", None, opset=opset)


def dense_mlp(seed=0, k=64):
    """tf2onnx's Dense layers: MatMul by a constant + Add of an (N,) bias, a BatchNorm1d, Relu,
    MatMul + Add of a (1, N) bias with the constant first: x [1, k] -> y [1, 10]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, 0.1, (k, 32)).astype(np.float32), "b1": rng.normal(0, 0.1, 32).astype(np.float32),
             "w2": rng.normal(0, 0.2, (32, 10)).astype(np.float32), "b2": rng.normal(0, 0.1, (1, 10)).astype(np.float32),
             **bn_params(rng, 32, "bn")}
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w1"], ["m1"], name="dense1"), n("Add", ["m1", "b1"], ["a1"], name="bias1"),
             bn_node("a1", "bn1", "bn", "bn"),
             n("Relu", ["bn1"], ["r1"], name="relu1"), n("MatMul", ["r1", "w2"], ["m2"], name="dense2"),
             n("Add", ["b2", "m2"], ["y"], name="bias2")]
    return make_model(nodes, inits, (1, k), "y", (1, 10))


def nhwc_classifier(seed=0, hw=16):
    """tf2onnx's form of a Keras CNN: a channels-last (1, hw, hw, 3) input, Transpose to NCHW,
    Conv + Relu, MaxPool, Conv + Relu, Transpose back to channels-last, Reshape (1, -1) (Keras
    Flatten), MatMul + Add (Dense), Softmax: -> y [1, 10]."""
    rng = np.random.default_rng(seed)
    h = hw // 2
    inits = {"w1": conv_w(rng, 8, 3, 3), "b1": rng.normal(0, 0.1, 8).astype(np.float32),
             "w2": conv_w(rng, 12, 8, 3), "flat": np.array([1, -1], np.int64),
             "wd": rng.normal(0, np.sqrt(2.0 / (h * h * 12)), (h * h * 12, 10)).astype(np.float32),
             "bd": rng.normal(0, 0.1, 10).astype(np.float32)}
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["xt"], name="to_nchw", perm=[0, 3, 1, 2]),
             n("Conv", ["xt", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             n("Relu", ["c1"], ["r1"], name="relu1"),
             n("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             n("Relu", ["c2"], ["r2"], name="relu2"),
             n("Transpose", ["r2"], ["r2t"], name="to_nhwc", perm=[0, 2, 3, 1]),
             n("Reshape", ["r2t", "flat"], ["f"], name="flatten"),
             n("MatMul", ["f", "wd"], ["d"], name="dense"),
             n("Add", ["d", "bd"], ["logits"], name="dense_bias"),
             n("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    return make_model(nodes, inits, (1, hw, hw, 3), "y", (1, 10))


def long_sequence_gap(seed=0, length=300, c=4):
    """Conv1d k3 pad 1 (8 channels) and a GlobalAveragePool over a sequence longer than POOL's
    255-column window: x [1, c, length] -> y [1, 8, 1]."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["y"], name="gap")]
    return make_model(nodes, {"w": rng.normal(0, 0.3, (8, c, 3)).astype(np.float32)}, (1, c, length), "y", None)


def detect_head(seed=0, hw=8, na=3, no=7):
    """A YOLO-style detector: a 3x3 Conv + Relu backbone, a 1x1 head Conv to na*no channels, then
    the decoding YOLOv5 exports: Reshape (1, na, no, H, W), Transpose to (1, na, H, W, no),
    Sigmoid, xy = (2 s - 0.5 + grid) * stride, wh = (2 s)^2 * anchor, Concat, Reshape (1, -1, no):
    x [1, 3, 2 hw, 2 hw] -> y [1, na*hw*hw, no]."""
    rng = np.random.default_rng(seed)
    gy, gx = np.meshgrid(np.arange(hw), np.arange(hw), indexing="ij")
    grid = np.stack([gx, gy], -1).reshape(1, 1, hw, hw, 2).astype(np.float32) - 0.5
    anchor = (rng.uniform(4, 32, (1, na, 1, 1, 2))).astype(np.float32)
    inits = {"w1": conv_w(rng, 16, 3, 3), "wh": conv_w(rng, na * no, 16, 1),
             "s5": np.array([1, na, no, hw, hw], np.int64), "grid": grid, "anchor": anchor,
             "two": np.array(2.0, np.float32), "stride": np.array(2.0, np.float32),
             "split": np.array([2, 2, no - 4], np.int64), "out": np.array([1, -1, no], np.int64)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="backbone", strides=[2, 2], pads=[1, 1, 1, 1]),
             n("Relu", ["c1"], ["r1"], name="relu"),
             n("Conv", ["r1", "wh"], ["head"], name="head"),
             n("Reshape", ["head", "s5"], ["h5"], name="to5d"),
             n("Transpose", ["h5"], ["ht"], name="perm", perm=[0, 1, 3, 4, 2]),
             n("Sigmoid", ["ht"], ["sg"], name="sig"),
             n("Split", ["sg", "split"], ["xy", "wh_", "conf"], name="parts", axis=4),
             n("Mul", ["xy", "two"], ["xy2"], name="xy_x2"), n("Add", ["xy2", "grid"], ["xyg"], name="xy_grid"),
             n("Mul", ["xyg", "stride"], ["xyo"], name="xy_stride"),
             n("Mul", ["wh_", "two"], ["wh2"], name="wh_x2"), n("Mul", ["wh2", "wh2"], ["whs"], name="wh_sq"),
             n("Mul", ["whs", "anchor"], ["who"], name="wh_anchor"),
             n("Concat", ["xyo", "who", "conf"], ["dec"], name="cat", axis=4),
             n("Reshape", ["dec", "out"], ["y"], name="flat")]
    return make_model(nodes, inits, (1, 3, 2 * hw, 2 * hw), "y", (1, na * hw * hw, no))


def row_ops(seed=0, c=20):
    """The vector unit's row instructions: Conv 3 -> c, a per-pixel LayerNorm (channels-last
    Transpose sandwich), Conv c -> c, Div by 0.5 and a Softmax over the channels (inside the
    network: SOFTMAX with the Div in its exp_mult), Conv c -> 4. c > 8: rows of several words on
    'small'. [1,3,5,6] -> [1,4,5,6]."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["c1"], name="conv1"),
             n("Transpose", ["c1"], ["t1"], name="to_nhwc", perm=[0, 2, 3, 1]),
             n("LayerNormalization", ["t1", "g", "b"], ["ln"], name="ln", axis=-1, epsilon=1e-5),
             n("Transpose", ["ln"], ["t2"], name="to_nchw", perm=[0, 3, 1, 2]),
             n("Conv", ["t2", "w2"], ["c2"], name="conv2"),
             n("Add", ["c2", "t2"], ["a"], name="res"),
             n("Div", ["a", "k"], ["d"], name="scale"),
             n("Softmax", ["d"], ["s"], name="softmax", axis=1),
             n("Conv", ["s", "w3"], ["y"], name="conv3")]
    inits = {"w1": conv_w(rng, c, 3, 1) * 4, "g": rng.normal(1, 0.2, c).astype(np.float32),
             "b": rng.normal(0, 0.2, c).astype(np.float32), "w2": conv_w(rng, c, c, 1), "k": np.float32(0.5),
             "w3": conv_w(rng, 4, c, 1)}
    return make_model(nodes, inits, (1, 3, 5, 6), "y", (1, 4, 5, 6), opset=17)


def large_gap(hw=56, c=8, op="gap"):
    """A global average pool over a map of more than 1023 pixels (issue 9): row partials, then
    their mean (tpucompile/ops/pool.py). op: gap (GlobalAveragePool), avgpool (AveragePool with a
    kernel equal to the map), reduce_mean (over H, W): x [1, c, hw, hw] -> y [1, c, 1, 1]."""
    if op == "gap":
        node = helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")
    elif op == "avgpool":
        node = helper.make_node("AveragePool", ["x"], ["y"], name="gap", kernel_shape=[hw, hw])
    else:
        node = helper.make_node("ReduceMean", ["x"], ["y"], name="gap", axes=[2, 3], keepdims=1)
    return make_model([node], {}, (1, c, hw, hw), "y", None)


def assert_three_way(v) -> None:
    """A cosim Verdict ``v`` run with the RTL: passed, golden == SimPy == RTL on every output, the
    same cycles and retire trace."""
    assert v.passed, (v.notes, v.mismatches, v.first_retire_diff)
    assert v.cycles_rtl == v.cycles_simpy and v.first_retire_diff is None
    assert all(m["simpy_vs_rtl"] == 0 for m in v.mismatches.values()), v.mismatches
