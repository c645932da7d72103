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
throughout: rel 1e-9. The adversary scores' smallest magnitude over real keys is 9e-4 or more in every case (the
script prints it), far from any rounding that could flip a unit of the cut.

On another CPU the weights are the same bits (`redraw` draws them with tests/portable_draws.py); only the
computation's rounding differs, by amounts of the size test_ssa_authors.py measured (float64 about 1e-14
relative, the float32 cast about 1e-7), inside both tolerances. CI runs these tests on torch's AVX2 and plain kernels too (the stored_numbers mark).
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
from portable_draws import normal

pytestmark = pytest.mark.stored_numbers  # CI runs these under other CPU paths too

CLS, SEP, PAD = 2, 3, 0
TIGHT = dict(rel=1e-9, abs=1e-12)  # float64 throughout
CAST = dict(rel=1e-6, abs=1e-9)  # through the float32 task loss
# name: (seed, task family, num_labels, tau)
CASES = {
    "classification": (2, SENTENCE, 2, 0.3),
    "regression": (1, SENTENCE, 1, 0.3),
    "tagging": (5, TAGGING, 4, 0.5),
    "multiple_choice": (0, MULTIPLE_CHOICE, 2, 0.5),
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
            ["61fd6167757d7165", "2a2a0a2afe6a6a2e", "20b0606020206020"],
            ["0000000c0c000c00", "66fefe6efefafe00", "40c0004040404040"]
        ],
        "logits": [
            0.3353952639596283, -0.31595702945883164, 2.743624913290385, 0.10485102939609381, -0.3352014205186726,
            0.3835426005496393
        ],
        "adversarial_logits": [
            -2.7056143340434105, -4.469739679668127, 0.43324640546851284, -0.6932698810058067, -1.2936585241562502,
            -2.8438153086562306
        ],
        "divergence": 0.2693621558114797,
        "loss": 0.7816825566091685,
        "penalty": 4.11,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [31.49264386487542, 7.332880442419018, -8.010520193836332],
            "bert.encoder.layer.0.attention.self.query.weight": [
                1.1745474308753923, 0.2415024581011473, -0.24859186092939986
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                0.4686794798863391, 0.11140203443630502, -0.1192332511112328
            ],
            "bert.encoder.layer.1.output.dense.weight": [2.230837302901401, 0.7596072734972074, -0.6634344892832946],
            "classifier.weight": [0.7457389243548814, 0.22134689865805898, -0.22134689865805895],
            "bert.encoder.adversary.0.query.weight": [713.4604122841133, 212.60126655174588, -121.93926785107702],
            "bert.encoder.adversary.0.query.bias": [231.2836443200689, 105.99021281436981, -92.71198697144663],
            "bert.encoder.adversary.0.key.weight": [1405.2285937835645, 296.463929991692, -379.2370845427926],
            "bert.encoder.adversary.0.key.bias": [82.03279253503514, 25.428381920491834, -50.01073166600346],
            "bert.encoder.adversary.1.query.weight": [554.9771940188006, 160.44266399615546, -178.22511022493566],
            "bert.encoder.adversary.1.query.bias": [138.03841165811022, 71.82472061027669, -61.48853047131345],
            "bert.encoder.adversary.1.key.weight": [704.9607822853612, 161.57972141301323, -172.03105999034986],
            "bert.encoder.adversary.1.key.bias": [173.59171663406102, 77.76231621733069, -83.3140991080856],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [0.8782600189402212, 0.26523078596716837, -0.172655781375806],
            "bert.encoder.adversary.0.query.bias": [0.4820052775657405, 0.3088785372068268, -0.1632176480295499],
            "bert.encoder.adversary.0.key.weight": [1.7138041190909483, 0.3328542340769626, -0.4057355952489264],
            "bert.encoder.adversary.0.key.bias": [0.9093205602107318, 0.47133611636745193, -0.3787410806887125],
            "bert.encoder.adversary.1.query.weight": [1.1107843089354679, 0.2628117969882685, -0.2933055396351808],
            "bert.encoder.adversary.1.query.bias": [0.5669679237681468, 0.2288195156277915, -0.30481405325437816],
            "bert.encoder.adversary.1.key.weight": [1.3396266285158294, 0.2805299872496891, -0.23873363443513257],
            "bert.encoder.adversary.1.key.bias": [0.683213115918408, 0.2683049751996536, -0.3070266528573989],
        },
    },
    "regression": {
        "keep": [
            ["ddd5ffffff7dfdfd", "b0f898b80c0810fe", "f0d0f0d0f0f0f0f0"],
            ["00000030383c3800", "0c1c0c6c2cac1c0c", "0000000000000000"]
        ],
        "logits": [7.12138785582336, -3.0827846553467255, 5.609415921652431],
        "adversarial_logits": [4.40689551084996, -6.75486543277607, 4.6045318990613255],
        "divergence": 0.10503193021860979,
        "loss": 28.333543381761853,
        "penalty": 4.379999999999999,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [881.8279030294138, 258.5351865050386, -276.98705828631864],
            "bert.encoder.layer.0.attention.self.query.weight": [
                32.61089112823329, 8.932921489964228, -7.468828928049603
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                47.34773886520745, 17.07877411304307, -14.381016166212316
            ],
            "bert.encoder.layer.1.output.dense.weight": [44.8831657665303, 10.475914665992416, -8.773341457256848],
            "classifier.weight": [17.647579791016753, 6.86707939826561, -7.736080248650069],
            "bert.encoder.adversary.0.query.weight": [948.7070465061663, 199.6069235801932, -170.23984056824813],
            "bert.encoder.adversary.0.query.bias": [253.26345220000556, 128.08545565645872, -79.42086420552323],
            "bert.encoder.adversary.0.key.weight": [1151.8531632237998, 229.2733538693701, -226.18427712832542],
            "bert.encoder.adversary.0.key.bias": [225.35931276812457, 101.75494792996334, -80.46441016068476],
            "bert.encoder.adversary.1.query.weight": [3878.6421443033073, 928.9270578398769, -857.255258338033],
            "bert.encoder.adversary.1.query.bias": [910.5034839976818, 398.38878720099115, -431.72541774185925],
            "bert.encoder.adversary.1.key.weight": [4916.259649179817, 1101.1445092841832, -1202.6659084056555],
            "bert.encoder.adversary.1.key.bias": [1183.6152679261734, 555.1894258126887, -446.6148592964669],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [1.6655487274488856, 0.5344759124284157, -0.46278885384751606],
            "bert.encoder.adversary.0.query.bias": [0.701305126505813, 0.279319456766866, -0.37456381216179485],
            "bert.encoder.adversary.0.key.weight": [1.528380619881223, 0.40523488969230875, -0.391301166225009],
            "bert.encoder.adversary.0.key.bias": [0.6227241949089943, 0.25129308911608794, -0.26864507076226934],
            "bert.encoder.adversary.1.query.weight": [1.476198495897923, 0.24362419129993543, -0.2580589065113597],
            "bert.encoder.adversary.1.query.bias": [0.5375152522612292, 0.2310924618998751, -0.24454591678304002],
            "bert.encoder.adversary.1.key.weight": [2.4664249578697355, 0.46646834404075627, -0.45900340263486344],
            "bert.encoder.adversary.1.key.bias": [0.879744403243078, 0.4082758412051766, -0.2981280569007408],
        },
    },
    "tagging": {
        "keep": [
            ["d7ffffdfff7cdd9c", "dedefedcdcc8dcc8", "90f0d090f090d080"],
            ["41e7e3414141e5a2", "909296a092808092", "0000d0000000d0e0"]
        ],
        "logits": [
            -1.3931772232144461, 2.396485986893777, 0.20511674348031722, 2.053547220644664, -3.210547938567806,
            -1.6288042731065542, 1.3543696762659199, 1.3565819542267457, 0.299637361056689, 0.46053472500667225,
            1.5658580771746333, -0.3911781189351602, 0.11743748074668703, 3.365900766746026, 5.618522200876711,
            0.09648191392828531, -4.378292665340276, 2.985635420111372, 2.922146144648691, 1.079087233788969,
            0.5929544179615543, 2.63747456692145, 1.8406189915738471, 2.586883329382135, -1.8407532090029455,
            0.2183291237823006, 2.6298335550815173, 3.905530989496123, -0.26295618527233594, -1.5529625797419926,
            1.5761428590964148, 5.32642263424277, -5.485577189760656, 0.19954681145589445, 1.3684714399441167,
            2.118379174460585, -4.332506145233884, -3.7987102065469487, 7.32882471891716, -0.12640010343979424,
            2.3142583311531904, -1.1974801824723849, 3.4494255653956083, -2.6279437628314994, 2.152910825233587,
            -5.889189768946312, 2.0554005431618165, 5.215552261662253, -2.9241623038203373, -3.817313285448964,
            5.469673219713542, 1.4037660746065355, 2.4599331810109426, -0.6974003933556613, 1.6030424603800753,
            4.025933097835658, 3.0174846908071644, -6.430372903376978, 2.904228953859804, 4.148150944752225,
            -1.249899857728267, -3.568165503929208, -0.9646045097618539, 2.974824608871643, 0.835708535517552,
            2.8477617479957713, 0.0004506435476016313, 1.9444786222230894, 1.9264129370315999, 2.8558490264227743,
            0.4032189525145471, 1.318783861272798, 3.9843338776960358, 2.119420777093836, 0.9061421905247783,
            0.1844723385481739, 4.025945355356236, 2.496235731861568, 0.3518698804424939, 2.686101217199089,
            2.2575290160503, 3.3072995280551103, 1.5956159404470216, 0.3119612910022545, -0.24512705358697215,
            1.8842822641324595, 0.7272201083076106, 3.160760427326324, 3.573628748165904, 2.8060086544035725,
            0.8869972902618563, 1.0617329124502204, 1.4992087666364344, 2.0602598570360997, -1.0116281855599545,
            2.7868191662628554
        ],
        "adversarial_logits": [
            -0.7348269164707303, 1.5914587430005807, 0.6485212940956618, 2.7281241668379055, 0.6015975668022783,
            0.7162750457592925, 3.663553714842173, 0.529761322059146, 1.0767875363575508, 0.8707823239558187,
            2.197908926997812, -0.5845533503461199, 0.76452940516636, 1.4305707724044519, 3.615684401472053,
            2.4565084064778935, -3.8584284735986714, 1.0776652855788074, 4.249903629625841, 0.797313252111084,
            1.5205450024856764, 1.9077399937721429, 2.0490530048840325, 3.1739870823591145, -0.8285676212769613,
            2.5249033326966015, 1.9917753150516426, 2.2969349673368353, 1.079070599874834, 0.3074061378329134,
            1.0433192437482397, 3.99254378231423, -5.420336278914447, 0.02601178883806317, 2.015917245425959,
            2.3371025169989115, -4.877097220185593, -1.6008422283179906, 6.881241665840265, 0.17782773860645035,
            2.135992143425951, -3.627990865612793, 5.5309766679901, -0.9363342147838258, 2.9063098488945656,
            2.2957603422552872, 0.6493118635878297, 4.014197199652444, -0.5358778535411005, -2.410623475827205,
            3.2713071880585693, 2.0818193855195584, -2.577619752081854, 2.2563478113225957, 5.038845393417969,
            2.34233863847155, 0.5631812816245075, 0.732628753617475, 4.980495473052314, 0.9196691528348722,
            0.5943306404531412, -1.852976336880777, -1.3019217594340229, 3.528912646518625, 0.39876072633149157,
            3.1722954008820468, -0.9012733359623147, 2.7984187827227442, 1.530737791903277, 3.0488988921095244,
            1.8916053630237974, 0.9133946283075915, 3.0552854928481086, 1.544045496843006, 2.1950597099381532,
            0.7936446779942739, 3.8522912014412762, 3.0915398154362954, -1.4894333111622333, 2.7158019562671125,
            2.1253980448214818, 3.0734154579871906, 2.74426401752074, -0.5048867758308826, -0.15266063416856293,
            2.958734926328828, -2.872432380533045, 5.790074348247862, 2.915497274688179, 2.4191094721999518,
            2.353279133629085, 0.3595312645706423, 3.2900797737313012, 3.2733311666370275, -0.5926967419650399,
            1.757885319470102
        ],
        "divergence": 3.685160853757481,
        "loss": 6.248257981581705,
        "penalty": 14.0,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [177.93679656954808, 37.228452901249256, -42.91934913653937],
            "bert.encoder.layer.0.attention.self.query.weight": [
                5.595197610302251, 1.4212765844878263, -1.3143485704774427
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                4.388970645880995, 1.3966527631955958, -1.0958143386180077
            ],
            "bert.encoder.layer.1.output.dense.weight": [7.071416432314919, 1.1556861748110576, -1.354239643957723],
            "classifier.weight": [3.45829759553318, 1.1673514991820693, -1.0358118169706185],
            "bert.encoder.adversary.0.query.weight": [6475.1916610685585, 1042.5231461200237, -1067.7200750930638],
            "bert.encoder.adversary.0.query.bias": [1371.6107868122256, 529.7212561208155, -648.9957616224918],
            "bert.encoder.adversary.0.key.weight": [7219.961243698676, 1738.124499686551, -1907.7260755259363],
            "bert.encoder.adversary.0.key.bias": [401.3533990887672, 22.11279775425914, -230.74854124032095],
            "bert.encoder.adversary.1.query.weight": [5553.867828070531, 1236.2184222330527, -1246.6100628830093],
            "bert.encoder.adversary.1.query.bias": [985.9016617429515, 450.3936907128926, -390.95929134580535],
            "bert.encoder.adversary.1.key.weight": [4588.097317730072, 1525.1785006577747, -1056.6709205600068],
            "bert.encoder.adversary.1.key.bias": [263.81546869018274, 63.76241539454073, -131.41760551757508],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [4.2586953638729605, 1.01067960487425, -0.9331556468775325],
            "bert.encoder.adversary.0.query.bias": [2.345772134667469, 0.9852571971007785, -1.0695505321192267],
            "bert.encoder.adversary.0.key.weight": [3.9913018744853312, 0.7786448227620056, -0.9371722387558199],
            "bert.encoder.adversary.0.key.bias": [2.0154789593117064, 1.0131528013027364, -0.8018774130916213],
            "bert.encoder.adversary.1.query.weight": [4.614522114102855, 1.2993848774906762, -0.7804970516836973],
            "bert.encoder.adversary.1.query.bias": [1.9517811123121744, 0.5340694474208015, -1.045987907511293],
            "bert.encoder.adversary.1.key.weight": [4.662769109460901, 1.1316054724099807, -1.3262499801964076],
            "bert.encoder.adversary.1.key.bias": [1.9259855527099992, 0.9923959671809293, -0.8584911778706552],
        },
    },
    "multiple_choice": {
        "keep": [
            ["100041457f4f004f", "0e0a1e7e7606425e", "0070107050100010", "0000107010100010"],
            ["7b7fffbf73ffffff", "1e001e9e76fe7ebe", "d0d0d0f0f0f0f0f0", "f030d0f0f0f0f0f0"]
        ],
        "logits": [0.12961661468953645, 0.7329502967163014, -0.5046807337386603, -2.2332285504620915],
        "adversarial_logits": [1.603312306302684, 0.9382443945205361, 2.015111771903426, 1.4480255809924198],
        "divergence": 0.15859824074903953,
        "loss": 0.4584668440824782,
        "penalty": 13.875,
        "grad": {
            "bert.embeddings.word_embeddings.weight": [25.554178310032935, 10.403080275855766, -5.916696301839638],
            "bert.encoder.layer.0.attention.self.query.weight": [
                1.0285203801019658, 0.26682686975197245, -0.22963604708713922
            ],
            "bert.encoder.layer.1.attention.self.key.weight": [
                0.3732100753499225, 0.0894161063661602, -0.08778306574438158
            ],
            "bert.encoder.layer.1.output.dense.weight": [0.9552687759018786, 0.16930503502785219, -0.16739681396024408],
            "classifier.weight": [0.21486569094242583, 0.07801094275184867, -0.1425319746550244],
            "bert.encoder.adversary.0.query.weight": [2073.3908134942935, 558.1987384644909, -415.828261587326],
            "bert.encoder.adversary.0.query.bias": [570.6162764878446, 307.2018968059971, -217.30009374598902],
            "bert.encoder.adversary.0.key.weight": [2160.305491856915, 649.4229675221193, -885.0774905161504],
            "bert.encoder.adversary.0.key.bias": [462.67857276974604, 151.4987814335848, -309.2922046774996],
            "bert.encoder.adversary.1.query.weight": [921.9283799467129, 310.04100447758753, -319.10682470829255],
            "bert.encoder.adversary.1.query.bias": [229.8184238343093, 150.89807222838616, -71.26547679893874],
            "bert.encoder.adversary.1.key.weight": [802.7934919049603, 183.9696104545657, -187.857004905447],
            "bert.encoder.adversary.1.key.bias": [141.44299161987226, 33.79883613913805, -74.40805458475072],
        },
        "penalty_grad": {
            "bert.encoder.adversary.0.query.weight": [6.154547088135896, 1.8168818208685893, -1.6155716222121481],
            "bert.encoder.adversary.0.query.bias": [2.498362271632983, 1.2950721630476576, -1.1480408404256053],
            "bert.encoder.adversary.0.key.weight": [5.215847840507843, 2.0606019343325355, -1.230983727322658],
            "bert.encoder.adversary.0.key.bias": [2.307303924073548, 1.644987066706655, -0.6571330692002605],
            "bert.encoder.adversary.1.query.weight": [10.872528179833509, 3.3537423727732545, -3.1961175798420274],
            "bert.encoder.adversary.1.query.bias": [3.1758157832204525, 1.1621917119914875, -2.009966609727659],
            "bert.encoder.adversary.1.key.weight": [5.4009255104040355, 1.1364343756185318, -1.250810302694337],
            "bert.encoder.adversary.1.key.bias": [1.5848395067034209, 0.7192186412592341, -0.3863130811102066],
        },
    },
}


def build(case: str, tau: float | None = None, direct: bool = False):
    """The model whose tensors were copied into the authors': what `finetune --method asa` builds for the case's
    task family with every ASA option at its default (the registry's `build_model`), its weights drawn by
    `redraw` in float64, alike on every CPU. direct: the family's head class called with its own defaults
    instead, as notebook 05 does."""
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
    redraw(model, seed)
    return model.train()


def redraw(model, seed: int) -> None:
    """Weights larger than BERT's N(0, 0.02), biases and LayerNorms off their zeros and ones: at BERT's init the
    cut barely moves the outputs (D about 1e-10), so D's share of the gradient would go untested; the adversaries'
    biases are large, so every term of `Adversary`'s expansion counts and some rows are cut whole. Drawn in
    float64 by tests/portable_draws.py, so every CPU starts from the weights the authors' code received."""
    generator = torch.Generator().manual_seed(seed)
    model.double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(normal(generator, p.shape, 0.1, mean=1.0))
            elif name.startswith("encoder.embeddings."):  # BERT's N(0, 0.02), LayerNorm-ed before use; the
                p.copy_(torch.where(p != 0, normal(generator, p.shape, 0.02), p))  # padding row stays zero
            elif name.startswith("adversaries."):
                p.copy_(normal(generator, p.shape, 0.3 if name.endswith("weight") else 1.0))
            else:
                std = 1.0 if name == "classifier.weight" else 0.3 if name.endswith("weight") else 0.1
                p.copy_(normal(generator, p.shape, std))


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
