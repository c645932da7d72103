"""ASA (Wu et al. 2023) against numbers computed by the authors' own code.

Where the numbers come from: gingasan/adversarialSA at commit 049af10cf9966acd7dcf8990a11127aecf2348a1, its
classes `AsaBertForSequenceClassification` (classification and regression), `AsaBertForTokenClassification` and
`AsaBertForMultipleChoice` (modeling/bert.py:712-953) and `divergence` (modeling/utils.py:38-46), run by
`tests/references/asa_authors.py` (its docstring has the command) in float64 with dropout 0, with transformers
5.23 and three shims for the API it lost since their 4.17 (the script says which). Their model received the
weights of the models `build` makes, tensor by tensor: the encoder through `ours_to_hf`, each layer's adversary
(query, key) and the classifier. The batch went through their forward in training mode as their training step
calls it (run_sent_clas.py:791-803): outputs[0] = L + D + tau^2 R backward, outputs[2] = L + D the logged loss.
Their Gumbel draw is added and subtracted (modeling/utils.py:31-32), so it changes nothing here; the script seeds
it anyway. Their code is not part of this repository; only its outputs are stored here.

What is compared, per case (sentence classification and regression, tagging, multiple choice):
- the cut: every layer's keep (B, L, L), exactly. L = 8, so each query row is one byte (key 0 the high bit),
  one hex string per sequence; padded queries' rows included. Every case cuts some rows whole.
- clean and adversarial logits, the divergence D, the logged loss L + D;
- the penalty: its value tau^2 R (R, the kept units of all layers per sequence, read from the keeps) and its
  gradient on the adversaries. Our forward adds the penalty's gradient only (its value is not in the logged
  loss, as the authors' outputs[2]), so its gradient is the difference of the gradients at tau and at tau = 0;
  the authors' is the gradient of their outputs[0] - outputs[2];
- the gradient of the whole step: norm, largest and smallest entry of chosen tensors, named as in the
  authors' model, each to within a fraction of its norm.

Two precisions. The task loss is computed in float32 (`.float()` in the heads' `loss`), so the loss and every
gradient that passes through it (encoder, classifier) carry float32 rounding: rel 1e-6. Everything else (the
cut, both passes' logits, D, the adversaries' gradients, which the task loss does not reach) is float64
throughout: rel 1e-9. The adversary scores' smallest magnitude over real keys is 4e-4 or more in every case (the
script prints it), far from any rounding that could flip a unit of the cut.
"""
from types import SimpleNamespace

import pytest
import torch

from course_lib.methods.asa import ASA_MODELS, masked_fraction
from course_lib.methods.registry import get_method
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig
from course_lib.model.weights import ours_to_hf
from course_lib.tasks.multiple_choice import MULTIPLE_CHOICE
from course_lib.tasks.sentence import SENTENCE
from course_lib.tasks.tagging import TAGGING
from course_lib.training.config import FinetuneConfig

CLS, SEP, PAD = 2, 3, 0
TIGHT = dict(rel=1e-9, abs=1e-12)  # float64 throughout
CAST = dict(rel=1e-6, abs=1e-9)  # through the float32 task loss
# name: (seed, task family, num_labels, tau)
CASES = {
    "classification": (6, SENTENCE, 2, 0.3),
    "regression": (1, SENTENCE, 1, 0.3),
    "tagging": (5, TAGGING, 4, 0.5),
    "multiple_choice": (2, MULTIPLE_CHOICE, 2, 0.5),
}
# The tensors whose gradients are stored: the authors' names (our encoder's through `ours_to_hf`).
GRADIENTS = ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
             "bert.encoder.layer.1.attention.self.key.weight", "bert.encoder.layer.1.output.dense.weight",
             "classifier.weight")
ADVERSARY_GRADIENTS = tuple(f"bert.encoder.adversary.{i}.{part}.{p}" for i in (0, 1) for part in ("query", "key")
                            for p in ("weight", "bias"))

AUTHORS = {
    "classification": {
        "keep": [
            ["009d5240d600d710", "00fe48aefefefe00", "00f0d0a08040c000"],
            ["242ceeffee0c6e6e", "9e949e9ede9eb2de", "2000b0b0b0b0f0b0"]
        ],
        "logits": [
            0.6021107818808935, -4.274056440092075, 0.08995416523579047, -3.4109526806514445, 0.2949965149198368,
            -3.4194792645822103
        ],
        "adversarial_logits": [
            -0.8343779599866323, -3.6304492111818973, 2.0212833369621506, -3.9757713050468335, -0.35630205781222735,
            -1.5534975798278614
        ],
        "divergence": 0.11581908837352073,
        "loss": 2.9998324713956244,
        "penalty": 4.95,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [126.35597108201067, 70.66222399418544, -37.01911080950086],
            "bert.encoder.layer.0.attention.self.query.weight": [
                5.637520092219724, 1.2862583035791597, -1.2347505349808754
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                1.3335831601678898, 0.21030366313538204, -0.6520551233742551
            ],
            "bert.encoder.layer.1.output.dense.weight": [5.631624722076101, 1.395370660529966, -2.505890497527587],
            "classifier.weight": [2.4276963798369473, 0.5601909937915989, -0.5601909937915989],
            "bert.encoder.adversary.0.query.weight": [1578.1197617163984, 358.1771549433785, -398.6790214673471],
            "bert.encoder.adversary.0.query.bias": [494.2027371408941, 166.2378859095129, -321.64900976450514],
            "bert.encoder.adversary.0.key.weight": [3182.6699253147663, 923.8016760425784, -918.9840949269518],
            "bert.encoder.adversary.0.key.bias": [208.87314931793597, 90.54975294375936, -72.31702278045287],
            "bert.encoder.adversary.1.query.weight": [294.86988301971587, 76.05080141984777, -73.33592681204777],
            "bert.encoder.adversary.1.query.bias": [81.62090576837728, 38.2224871889805, -39.74734657985605],
            "bert.encoder.adversary.1.key.weight": [344.3545594590585, 142.62125596621908, -120.52444624428766],
            "bert.encoder.adversary.1.key.bias": [26.53346879111992, 9.875020081595492, -18.420644151189634],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [1.7611308436037176, 0.3219466714659845, -0.33982498440960923],
            "bert.encoder.adversary.0.query.bias": [0.801510911093947, 0.3173394975010904, -0.3704244921517595],
            "bert.encoder.adversary.0.key.weight": [1.3871829258142219, 0.3344466692579018, -0.2630335679479579],
            "bert.encoder.adversary.0.key.bias": [0.7622482425055853, 0.3766210017110095, -0.1911707120487518],
            "bert.encoder.adversary.1.query.weight": [2.011988647791356, 0.5235442586488622, -0.28262178202645705],
            "bert.encoder.adversary.1.query.bias": [0.836465656905711, 0.36676318453879303, -0.1880921907784754],
            "bert.encoder.adversary.1.key.weight": [2.3115029626477512, 0.6185353777565775, -0.8810184272586349],
            "bert.encoder.adversary.1.key.bias": [0.9785921607503894, 0.46758489982774043, -0.625564942205497],
        },
    },
    "regression": {
        "keep": [
            ["fa6afafaff6afe20", "fe002200eefef602", "f0002000e000f000"],
            ["ef6f656fff6502ed", "7e6e007e26242e04", "602000f0202000f0"]
        ],
        "logits": [-2.9383282398007955, -1.214186847512806, -4.164582980624923],
        "adversarial_logits": [-4.483448511537247, -1.8174815568371472, -4.030983899603968],
        "divergence": 0.019654814712253162,
        "loss": 37.09327315223408,
        "penalty": 4.950000000000003,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [1243.61263498587, 453.2969583172739, -393.3684113640326],
            "bert.encoder.layer.0.attention.self.query.weight": [
                53.97794417750455, 14.426532759374359, -19.890112984803924
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                16.71141640818379, 6.671321236101147, -4.3539197902965405
            ],
            "bert.encoder.layer.1.output.dense.weight": [93.54047306433391, 25.320981262050235, -24.41041246025392],
            "classifier.weight": [29.85459424886027, 10.985216315044878, -10.795023072403254],
            "bert.encoder.adversary.0.query.weight": [287.407022991816, 84.20993708283417, -84.80056576373177],
            "bert.encoder.adversary.0.query.bias": [67.75519672199088, 29.095792789767486, -31.561681293037207],
            "bert.encoder.adversary.0.key.weight": [407.27359491144495, 113.5660039557998, -86.16650521348683],
            "bert.encoder.adversary.0.key.bias": [24.237573219457918, 9.683835994640928, -13.535234915448287],
            "bert.encoder.adversary.1.query.weight": [386.7322192608422, 90.08509554170188, -84.02122779189405],
            "bert.encoder.adversary.1.query.bias": [97.23197996376284, 45.633275591710984, -42.324955602782936],
            "bert.encoder.adversary.1.key.weight": [313.9504486481473, 89.77205563093706, -82.61751778846869],
            "bert.encoder.adversary.1.key.bias": [92.74840175694757, 39.76540111030634, -45.75261627984932],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [1.894680539723513, 0.6372058564984497, -0.42596943566355483],
            "bert.encoder.adversary.0.query.bias": [0.7785131395856325, 0.4462086353428848, -0.25536384866873074],
            "bert.encoder.adversary.0.key.weight": [2.4259651822550654, 0.640842814946993, -0.5258318972631335],
            "bert.encoder.adversary.0.key.bias": [1.039128568999699, 0.4801396621695004, -0.3799144971845873],
            "bert.encoder.adversary.1.query.weight": [2.505628159671668, 0.6334258309593127, -0.4611412092877344],
            "bert.encoder.adversary.1.query.bias": [0.8569774686801939, 0.28484010066798, -0.42077979149461286],
            "bert.encoder.adversary.1.key.weight": [1.9611737218278633, 0.42115916430066086, -0.564098462173074],
            "bert.encoder.adversary.1.key.bias": [0.6575392870485754, 0.36468024679972966, -0.2869793648044152],
        },
    },
    "tagging": {
        "keep": [
            ["dfeedeffdfcf7ccf", "dccefededeec4efe", "f0f0f0f0f0f0e0f0"],
            ["fdfd000080fd00fd", "fafa00f8f8002028", "f0f0a0a0f080b000"]
        ],
        "logits": [
            -0.17387846004544105, 0.42873202187004633, 0.9723647209649782, -5.317386702086489, 0.5660034397665397,
            2.4908018019683897, 2.0436262035322117, -4.9345607562007086, 1.7580141197559311, 0.08096503680157952,
            1.3286253342020373, -4.6386151112423075, 1.957039913010804, 2.6772970957406135, 2.709251639470552,
            -5.239803938683977, 1.0396804696686406, 0.5071194937562833, 2.843257338751035, -4.1359960732712615,
            0.5377357297038794, 1.4464682601867191, 1.8331138182992233, -5.42713581921487, 4.713729431372911,
            0.9656115715171687, 1.146649345958899, -5.039106468197319, 0.13033772342320926, 1.9421936081760092,
            2.1433038849414494, -6.292878057920296, -1.5488555012553307, 2.3386220394825217, 0.4134352259591789,
            -3.380834508207789, -1.5919411682751974, 2.8366082299452686, 1.2614126932170888, -4.065501425570069,
            0.1942222893129657, 3.998941120190903, 3.4929611150973146, -3.952664157206695, -1.4732170334715526,
            1.5611234752415797, 2.331051311244064, -3.369743544722942, -1.873440183022936, 1.5472562723114311,
            1.1744433303875632, -2.6601787993543846, -1.762159731680014, 2.160173960574802, 0.9670648854409003,
            -2.967562383787887, -1.4280553269571659, -0.13044464328212868, -1.6566656237742026, -0.7343277641601904,
            -2.295040985600961, 2.5280048453818544, 2.3403874481856626, -4.530956831881351, -0.7193332326787449,
            4.0965440852961335, 0.9673337875581194, -5.3048911918232635, 0.8784723619162673, 3.9718703103672235,
            1.6973936014826212, -5.549882106527346, 0.1401209475413796, 3.6250896515268565, 2.1221438539393738,
            -5.635172145211738, -0.12802148844172412, 3.884772956544522, 2.060322751717274, -5.548267572929391,
            -0.7061733580464438, 3.551604197805964, 1.5682591196605198, -4.58397844911979, -1.0222110505935138,
            3.7764955976348356, 1.9441030904838614, -5.262564068732347, 2.708434681565258, 3.1552364555579584,
            1.5493010613421971, -6.26983854460879, -1.7336519977020086, 4.629925799594034, 2.8578085705340865,
            -5.876414197035539
        ],
        "adversarial_logits": [
            0.22724685354600743, 2.0093515087529683, 1.63408327617607, -5.55131901870142, 0.8629225324120606,
            2.886286474330311, 1.8008245565862597, -5.431983549433101, 1.562318285833571, 0.6099541659250276,
            1.4352784787283015, -3.8131829884548414, 1.883714595816096, 2.7591195667937756, 2.1901769679553373,
            -5.574302335144276, 3.368953503540321, 1.3969172266613596, 1.9220951827306543, -5.298698472354997,
            1.0386296997581033, 2.120963602361216, 1.5788015433120552, -5.62525915055474, 3.677159019963436,
            0.31553334572816194, 0.6865940733426228, -5.161346192759866, 0.5610116312804194, 2.6460233006089533,
            1.9981117869803366, -6.63210556606823, -1.0231677534121393, 2.402972688093222, 1.3744748093285895,
            -3.481803755532085, -1.2264094317130934, 2.7652552861660658, 1.346981903705952, -3.996385419711849,
            0.863393205931302, 3.7712841372631978, 2.463794507482652, -3.7757569551188648, -1.1770367589594994,
            1.8337433854132463, 2.009019863663544, -3.7295845701575425, -1.5230402177105677, 1.8350676142008164,
            0.9333210900240472, -3.1064062033391058, 0.09409313729868884, 2.9771573769409887, -0.4201600428059622,
            -4.215226469675421, -0.3775884577188702, 2.7871026674831225, 0.4963691970903712, -3.4287120428339586,
            -2.43659057603013, 0.5070249505434115, 1.862229429558215, -2.966859076997257, -0.7193332326787449,
            4.0965440852961335, 0.9673337875581194, -5.3048911918232635, 0.8784723619162673, 3.9718703103672235,
            1.6973936014826212, -5.549882106527346, -1.0327862614273713, 2.6047179084719567, 2.104740858147723,
            -3.824946909584618, -0.5565203931787885, 1.9045733583603672, 2.198080785524904, -3.9817405415361113,
            -0.7061733580464438, 3.551604197805964, 1.5682591196605198, -4.58397844911979, 1.6976289730635412,
            0.40652501526886065, 1.3160163267816247, -4.032103969192671, 3.4138886020669537, 2.1348766648517743,
            -0.1551355353095416, -4.889968509521787, -0.8057394708057104, 4.345919621678429, 2.652184973326581,
            -6.15018530074521
        ],
        "divergence": 1.916172522801559,
        "loss": 4.413644719218141,
        "penalty": 16.75,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [140.81228052979398, 31.125964039430286, -35.61298127022016],
            "bert.encoder.layer.0.attention.self.query.weight": [
                7.366180155870917, 2.229894966600017, -1.5448227626235265
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                1.9801455032778927, 0.4442679337167085, -0.33344315854075024
            ],
            "bert.encoder.layer.1.output.dense.weight": [5.6274850140586725, 1.1510477588708978, -1.1562780201848348],
            "classifier.weight": [1.6432026918147102, 0.5092112307849848, -0.4608323596005668],
            "bert.encoder.adversary.0.query.weight": [6435.636246069792, 1854.0332013088068, -1473.7430170903986],
            "bert.encoder.adversary.0.query.bias": [1486.8217198395046, 657.4937694026287, -758.3248435237222],
            "bert.encoder.adversary.0.key.weight": [8697.790645646148, 2390.2337187632775, -2922.1723079768153],
            "bert.encoder.adversary.0.key.bias": [1737.861595315101, 812.1147444327582, -938.4339092166491],
            "bert.encoder.adversary.1.query.weight": [1434.8081451951643, 229.21568948019666, -283.01215581611444],
            "bert.encoder.adversary.1.query.bias": [370.9065899534209, 166.7595861383225, -68.58377070683952],
            "bert.encoder.adversary.1.key.weight": [3399.1904919450158, 872.9593574390958, -1026.4797346563719],
            "bert.encoder.adversary.1.key.bias": [106.6389410052879, 43.5170792934036, -47.59297137734686],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [3.387612845443901, 0.6202214983454609, -0.723662258017647],
            "bert.encoder.adversary.0.query.bias": [1.4494343431574226, 0.4158795610823831, -0.6435053750760104],
            "bert.encoder.adversary.0.key.weight": [6.074282964658827, 1.5084986963656537, -1.8864091404563195],
            "bert.encoder.adversary.0.key.bias": [2.6546306418022465, 1.1635746768521922, -1.4456809799104953],
            "bert.encoder.adversary.1.query.weight": [9.421487835117121, 2.0441333297812956, -1.9210146016155827],
            "bert.encoder.adversary.1.query.bias": [2.819043486301288, 1.4973617690370962, -1.3798585153431069],
            "bert.encoder.adversary.1.key.weight": [11.453291868974715, 2.8116409973694863, -2.7579338976090035],
            "bert.encoder.adversary.1.key.bias": [3.417022570774008, 2.1020930581701807, -1.8945682444812806],
        },
    },
    "multiple_choice": {
        "keep": [
            ["800a00feffa400ac", "acaebeeeae2e06fc", "8000c080e00000d0", "80008080e0000090"],
            ["acbfbf24bfbff524", "8094000000140000", "e020f060f080f070", "e0d0f040d000d070"]
        ],
        "logits": [1.6161316566384047, -0.47765275437719434, -1.3396525068373712, 0.6593706732329261],
        "adversarial_logits": [0.619573098072239, 0.0996694895867078, 1.430363053574974, 0.9023558348523801],
        "divergence": 0.42556534553189335,
        "loss": 2.5935911438988892,
        "penalty": 10.6875,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [92.84915674603121, 32.76755733273141, -29.501534908827608],
            "bert.encoder.layer.0.attention.self.query.weight": [
                3.4582918530487388, 0.7972735030684026, -0.5979108462265078
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                3.544889567671159, 1.1895592202007423, -0.8098888875179885
            ],
            "bert.encoder.layer.1.output.dense.weight": [7.33272280709762, 2.259034755905297, -1.9629440818997248],
            "classifier.weight": [3.745097619346792, 1.8500425643072882, -1.5077793155792596],
            "bert.encoder.adversary.0.query.weight": [1175.5826896370515, 270.762209214653, -299.5294605886194],
            "bert.encoder.adversary.0.query.bias": [218.22638477866562, 106.09772883934671, -93.00530219410936],
            "bert.encoder.adversary.0.key.weight": [966.5958745675579, 296.990091035208, -188.53723210673252],
            "bert.encoder.adversary.0.key.bias": [233.14990478227875, 114.41561410020313, -71.32024168630139],
            "bert.encoder.adversary.1.query.weight": [1281.6726144951322, 247.4639125560147, -210.44258643853925],
            "bert.encoder.adversary.1.query.bias": [332.3356328905665, 107.17352163014564, -164.52458432535343],
            "bert.encoder.adversary.1.key.weight": [1555.025354496884, 577.204778202369, -548.3313652055809],
            "bert.encoder.adversary.1.key.bias": [33.08422605378408, 18.433390124399864, -19.243801491993963],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [5.8522079914205225, 1.6494843014943812, -1.719882235400514],
            "bert.encoder.adversary.0.query.bias": [2.4002108249364937, 1.0347740477717442, -1.513885592733243],
            "bert.encoder.adversary.0.key.weight": [5.196556329632373, 1.0774750231063661, -1.3362843623967449],
            "bert.encoder.adversary.0.key.bias": [2.163282846415986, 0.932630151496649, -1.1222342268690793],
            "bert.encoder.adversary.1.query.weight": [4.8224441109502605, 0.9204412069170343, -0.9171763217851077],
            "bert.encoder.adversary.1.query.bias": [1.8542970762496718, 0.8311831047151403, -0.8450793356028913],
            "bert.encoder.adversary.1.key.weight": [6.432453205205013, 1.243233569928374, -1.3259193838500927],
            "bert.encoder.adversary.1.key.bias": [2.52237523591849, 1.2698610324623942, -1.1733597417570363],
        },
    },
}


def build(case: str, tau: float | None = None, direct: bool = False):
    """The model whose tensors were copied into the authors': what `finetune --method asa` builds for the case's
    task family with every ASA option at its default (the registry's `build_model`), seeded draws, float64.
    direct: the family's head class called with its own defaults instead, as notebook 05 does."""
    seed, family, num_labels, case_tau = CASES[case]
    tau = case_tau if tau is None else tau
    torch.manual_seed(seed)
    encoder = BertModel(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0))
    if direct:
        model = ASA_MODELS[family](encoder, num_labels, dropout=0.0, mode="asa", asa_tau=tau)
    else:
        cfg = FinetuneConfig.from_dict({"method": "asa", "asa_tau": tau, "classifier_dropout": 0.0})
        task = SimpleNamespace(family=family, num_labels=num_labels)
        model = get_method("asa").build_model(cfg, encoder, task, None)
    redraw(model)
    return model.double().train()


def redraw(model) -> None:
    """Weights larger than BERT's N(0, 0.02), biases and LayerNorms off their zeros and ones: at BERT's init the
    cut barely moves the outputs (D about 1e-10), so D's share of the gradient would go untested; the adversaries'
    biases are large, so every term of `Adversary`'s expansion counts and some rows are cut whole."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
            elif name.startswith("encoder.embeddings."):
                continue  # N(0, 0.02), LayerNorm-ed before use; the padding row stays zero
            elif name.startswith("adversaries."):
                p.normal_(0.0, 0.3 if name.endswith("weight") else 1.0)
            else:
                p.normal_(0.0, 1.0 if name == "classifier.weight" else 0.3 if name.endswith("weight") else 0.1)


def inputs(case: str):
    """(input_ids, attention_mask, token_type_ids, labels): three sequences of up to 8 tokens, two padded, one a
    pair; multiple choice: two questions of two choices. Tag labels -100 on [CLS], [SEP] and padding."""
    ids = torch.tensor([[CLS, 11, 12, 13, 14, 15, 16, SEP], [CLS, 21, 22, SEP, 23, 24, SEP, PAD],
                        [CLS, 31, 32, SEP, PAD, PAD, PAD, PAD]])
    types = torch.zeros_like(ids)
    types[1, 4:7] = 1
    labels = {"classification": torch.tensor([1, 0, 1]),
              "regression": torch.tensor([0.5, 3.25, 4.75], dtype=torch.float64),
              "tagging": torch.tensor([[-100, 1, 0, 2, -100, 3, 0, -100], [-100, 2, 2, -100, 1, 0, -100, -100],
                                       [-100, 3, 1, -100, -100, -100, -100, -100]]),
              "multiple_choice": torch.tensor([1, 0])}[case]
    if case == "multiple_choice":
        ids = torch.cat([ids, ids[[2]]]).view(2, 2, 8)
        ids[1, 1, 1] = 41
        types = torch.cat([types, types[[2]]]).view(2, 2, 8)
    return ids, (ids != PAD).long(), types, labels


def keep_hex(keep: torch.Tensor) -> list[str]:
    """A (B, L, L) 0/1 keep with L = 8 as one hex string per sequence, a byte per query row, key 0 the high bit."""
    weights = 2 ** torch.arange(7, -1, -1)
    rows = (keep.round().long() * weights).sum(-1)  # (B, L)
    return ["".join(f"{int(r):02x}" for r in seq) for seq in rows]


def authors_named_grads(model) -> dict:
    """Our gradients under the authors' names: the encoder's through `ours_to_hf`, the adversaries', the head's."""
    encoder = {n: p.grad for n, p in model.encoder.named_parameters()}
    grads = {f"bert.{n}": g for n, g in ours_to_hf(encoder, len(model.encoder.layers)).items()}
    for i, adversary in enumerate(model.adversaries):
        grads.update({f"bert.encoder.adversary.{i}.{n}": p.grad for n, p in adversary.named_parameters()})
    grads.update({f"classifier.{n}": p.grad for n, p in model.classifier.named_parameters()})
    return grads


def summary(grad: torch.Tensor) -> list[float]:
    """A gradient as stored: its norm, largest and smallest entry (signed, so a reversed gradient shows)."""
    return [grad.norm().item(), grad.max().item(), grad.min().item()]


def at_scale(want: list[float], rel: float):
    """`want` to within `rel` of its norm (its first number): rounding errors scale with the whole tensor."""
    return pytest.approx(want, rel=0, abs=rel * want[0])


def two_passes(model, ids, mask, types, labels):
    """(clean logits, adversarial logits, the keeps of the adversarial pass, D), without gradients."""
    with torch.no_grad():
        clean, _ = model.logits(ids, mask, types)
        with model.adversarial_pass(model.encoder_mask(mask)) as keeps:
            adversarial, _ = model.logits(ids, mask, types)
        return clean, adversarial, keeps, model.divergence(clean, adversarial, labels)


@pytest.mark.parametrize("case", CASES)
def test_the_cut_and_both_passes_match_the_authors_code(case):
    model = build(case)
    want = AUTHORS[case]
    ids, mask, types, labels = inputs(case)
    clean, adversarial, keeps, divergence = two_passes(model, ids, mask, types, labels)
    assert [keep_hex(keep) for keep in keeps] == want["keep"]
    assert clean.flatten().tolist() == pytest.approx(want["logits"], **TIGHT)
    assert adversarial.flatten().tolist() == pytest.approx(want["adversarial_logits"], **TIGHT)
    assert divergence.item() == pytest.approx(want["divergence"], **TIGHT)
    kept = sum(keep.sum() for keep in keeps).item() / keeps[0].shape[0]  # R: kept units per sequence
    assert model.asa_tau ** 2 * kept == pytest.approx(want["penalty"], **TIGHT)


@pytest.mark.parametrize("case", CASES)
def test_every_case_cuts_some_units_and_some_whole_rows(case):
    """So the comparisons above exercise both kinds of unit and the cut-row rule (`asa_cut_row`): some real query
    row has every real key cut, and between a fifth and four fifths of the real units are cut in every layer."""
    model = build(case)
    ids, mask, types, labels = inputs(case)
    _, _, keeps, _ = two_passes(model, ids, mask, types, labels)
    mask = model.encoder_mask(mask)
    fully_cut = [((keep * mask[:, None, :]).sum(-1) == 0) & mask.bool() for keep in keeps]
    assert sum(rows.sum().item() for rows in fully_cut) > 0
    for keep in keeps:
        assert 0.15 < masked_fraction(keep, mask) < 0.8


@pytest.mark.parametrize("case", CASES)
def test_a_training_step_matches_the_authors_code(case):
    model = build(case)
    want = AUTHORS[case]
    ids, mask, types, labels = inputs(case)
    out = model(ids, mask, types, labels=labels)
    out.loss.backward()
    assert out.logits.flatten().tolist() == pytest.approx(want["logits"], **TIGHT)
    assert float(out.stats["divergence"]) == pytest.approx(want["divergence"], **TIGHT)
    assert out.loss.item() == pytest.approx(want["loss"], **CAST)
    grads = authors_named_grads(model)
    for name in GRADIENTS:
        assert summary(grads[name]) == at_scale(want["grad"][name], CAST["rel"]), name
    for name in ADVERSARY_GRADIENTS:
        assert summary(grads[name]) == at_scale(want["grad"][name], TIGHT["rel"]), name


@pytest.mark.parametrize("case", CASES)
def test_the_penalty_gradient_matches_the_authors_code(case):
    """tau^2 R enters our loss as its gradient alone: the step's gradient at tau less the one at tau = 0."""
    grads = []
    for tau in (None, 0.0):
        model = build(case, tau)
        ids, mask, types, labels = inputs(case)
        model(ids, mask, types, labels=labels).loss.backward()
        grads.append(authors_named_grads(model))
    for name in ADVERSARY_GRADIENTS:
        penalty_grad = grads[0][name] - grads[1][name]
        assert summary(penalty_grad) == at_scale(AUTHORS[case]["penalty_grad"][name], TIGHT["rel"]), name


@pytest.mark.parametrize("case", CASES)
def test_a_head_built_with_its_own_defaults_is_the_runs(case):
    """The head classes' defaults (cut row, divergences, noise) are the run options': the same weights give the
    same cut, passes and loss either way, so the comparisons above hold for a head built directly too."""
    ids, mask, types, labels = inputs(case)
    run, direct = build(case), build(case, direct=True)
    for got, want in zip(two_passes(direct, ids, mask, types, labels), two_passes(run, ids, mask, types, labels)):
        assert all(map(torch.equal, got, want)) if isinstance(got, list) else torch.equal(got, want)
    assert torch.equal(direct(ids, mask, types, labels=labels).loss, run(ids, mask, types, labels=labels).loss)
